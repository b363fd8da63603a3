"""The contextual-biasing benchmark of the synth corpus (Le et al. 2021's recipe, on our sentences).

Rare words: uncommon names and places (``resources/rare_*.txt``) and made-up product words drawn
from syllables; every one that occurs in the train transcripts more than ``max_train_count`` times
is dropped, so what remains is (nearly) absent from training. Sentences come from the corpus's own
templates with the rare names as the names, the rare places as the places and some product words
among the nouns; a sentence is kept only if it holds at least one rare word.

Splits (clean eSpeak, 1-10 s, like test): ``biasing_test`` read by the test voices (unseen in
training) and ``biasing_dev`` by the dev voices, for choosing the hotword settings without
looking at the test. For each utterance, ``biasing/<split>_lists.jsonl`` holds its rare words
("biased") and 1000 distractors from the same pool ("distractors"); the list at N distractors is
the biased words plus the first N (N = 100, 500, 1000 are nested). ``biasing/false_alarm.txt`` is a
1000-word list for decoding ordinary test utterances (no rare words): what biasing costs when the
list holds nothing that was said. Everything is a pure function of the seed and the train
transcripts.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import soundfile as sf
from lhotse import CutSet
from tqdm import tqdm

from asr.data.manifest import write_cuts
from asr.synth import corpus
from asr.synth.lexicon import Lexicon, Noun, _entries, load_lexicon
from asr.synth.sentences import SentenceGenerator, sentence_rng
from asr.synth.voices import draw_voice

BIASING_SPLITS = {"biasing_test": "test", "biasing_dev": "dev"}  # split -> whose voices read it
LIST_SIZES = (0, 100, 500, 1000)  # distractors per utterance list
NUM_DISTRACTORS = max(LIST_SIZES)
PRODUCT_WORDS = 1500
PRODUCT_NOUNS = 150  # product words the sentences use (the rest are distractors only)
FALSE_ALARM_FILE = "false_alarm.txt"
DEFAULT_UTTERANCES = {"biasing_test": 240, "biasing_dev": 120}

# Made-up product words: simple syllables eSpeak reads without surprises ("zentrova", "davolix").
_ONSETS = "b d f g k l m n p r s t v z br tr pl st kr gr".split()
_VOWELS = "a e i o u a e o".split()
_CODAS = ["", "", "", "", "n", "r", "l", "s"]
_ENDINGS = ["", "", "ix", "a", "o", "en", "ex", "ara", "ium", "elle", "on", "ia"]


def product_words(seed: int, count: int = PRODUCT_WORDS) -> list[str]:
    """``count`` distinct made-up words (2-3 syllables and an ending), a pure function of the seed."""
    rng = random.Random(f"{seed}/biasing/products")
    words: dict[str, None] = {}
    while len(words) < count:
        parts = [rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(rng.randint(2, 3))]
        word, ending = "".join(parts), rng.choice(_ENDINGS)
        if not (word[-1] in "aeiou" and ending[:1] in tuple("aeiou")):  # no vowel pile-ups ("gazaium")
            word += ending
        if 5 <= len(word) <= 12:
            words.setdefault(word)
    return list(words)


@dataclass(frozen=True)
class RarePool:
    """The rare words by kind (each sorted, none in the train transcripts more than allowed)."""

    names: tuple[str, ...]
    places: tuple[str, ...]
    products: tuple[str, ...]

    @property
    def words(self) -> list[str]:
        return sorted({*self.names, *self.places, *self.products})


def rare_pool(train_texts: Iterable[str], seed: int = 0, max_train_count: int = 0) -> RarePool:
    """The rare-word pool: candidates seen at most ``max_train_count`` times in ``train_texts``."""
    counts = Counter(w for text in train_texts for w in text.split())
    common = set(load_lexicon().names) | set(load_lexicon().places)

    def keep(words: Iterable[str]) -> tuple[str, ...]:
        return tuple(sorted({w for w in words if counts[w] <= max_train_count and w not in common}))

    return RarePool(keep(_entries("rare_names.txt")), keep(_entries("rare_places.txt")),
                    keep(product_words(seed)))


def biasing_generator(pool: RarePool) -> SentenceGenerator:
    """The corpus's templates with rare names and places, and product words among the nouns."""
    base = load_lexicon()
    products = tuple(Noun(w, None) for w in pool.products[:PRODUCT_NOUNS])
    return SentenceGenerator(Lexicon(nouns=base.nouns + products, verbs=base.verbs, adjectives=base.adjectives,
                                     names=pool.names, places=pool.places))


# per-process state of the synthesis workers (asr.synth.corpus sets up eSpeak in each)
_BIAS_GEN: SentenceGenerator | None = None
_RARE: frozenset[str] = frozenset()


def _set_pool(pool: RarePool) -> None:
    global _BIAS_GEN, _RARE
    _BIAS_GEN, _RARE = biasing_generator(pool), frozenset(pool.words)


def _make_biased(job: tuple[int, str, int, str, RarePool]) -> tuple[corpus.UtteranceMeta, list[str]]:
    """Pool task: utterance ``index`` of a biasing split (its text holds a rare word), written as FLAC."""
    seed, split, index, out_dir, pool = job
    if _BIAS_GEN is None or _RARE != frozenset(pool.words):
        _set_pool(pool)
    low, high = corpus.DURATION_BOUNDS["test"]
    for attempt in range(corpus.MAX_ATTEMPTS * 4):
        rng = sentence_rng(seed, split, index, attempt)
        text = _BIAS_GEN(rng)
        rare = sorted({w for w in text.split() if w in _RARE})
        if not rare:
            continue
        voice = draw_voice(rng, BIASING_SPLITS[split])
        audio = corpus._say(text, voice, rng)
        if low <= len(audio) / corpus.SAMPLE_RATE <= high:
            break
    else:
        raise RuntimeError(f"no {split} utterance with a rare word within {low}-{high} s")
    cut_id = f"{split}-{index:06d}"
    rel_path = f"audio/{split}/{cut_id}.flac"
    sf.write(Path(out_dir) / rel_path, audio, corpus.SAMPLE_RATE, format="FLAC", subtype="PCM_16")
    meta = corpus.UtteranceMeta(cut_id, rel_path, text, voice.voice, voice.rate, voice.pitch, len(audio))
    return meta, rare


def distractors(seed: int, cut_id: str, biased: Sequence[str], pool_words: Sequence[str],
                count: int = NUM_DISTRACTORS) -> list[str]:
    """``count`` pool words that are not the utterance's own, drawn for this utterance from the seed."""
    candidates = [w for w in pool_words if w not in set(biased)]
    if len(candidates) < count:
        raise ValueError(f"the rare pool holds {len(candidates)} other words, {count} distractors needed")
    return random.Random(f"{seed}/biasing/distractors/{cut_id}").sample(candidates, count)


def lists_path(out_dir: str | Path, split: str) -> Path:
    """Where a split's per-utterance lists go (read by ``asr.evaluation.biasing.read_lists``)."""
    return Path(out_dir) / "biasing" / f"{split}_lists.jsonl"


def build_biasing_sets(out_dir: str | Path, train_texts: Iterable[str], seed: int = 0, workers: int = 2,
                       utterances: dict[str, int] | None = None, max_train_count: int = 0) -> dict[str, CutSet]:
    """Synthesize the biasing splits into ``out_dir`` (cuts_<split>.jsonl.gz, audio/<split>/) with their lists,
    the rare pool (biasing/pool.txt) and the false-alarm list. Returns the cuts per split."""
    out = Path(out_dir)
    pool = rare_pool(train_texts, seed, max_train_count)
    words = pool.words
    if len(words) < NUM_DISTRACTORS + 20:
        raise ValueError(f"only {len(words)} rare words survive the train transcripts; "
                         f"{NUM_DISTRACTORS} distractors need more")
    (out / "biasing").mkdir(parents=True, exist_ok=True)
    (out / "biasing" / "pool.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    false_alarm = random.Random(f"{seed}/biasing/false_alarm").sample(words, NUM_DISTRACTORS)
    (out / "biasing" / FALSE_ALARM_FILE).write_text("\n".join(false_alarm) + "\n", encoding="utf-8")
    sizes = {**DEFAULT_UTTERANCES, **(utterances or {})}
    result = {}
    pool_workers = corpus.start_pool(workers)
    try:
        for split, count in sizes.items():
            (out / "audio" / split).mkdir(parents=True, exist_ok=True)
            jobs = [(seed, split, i, str(out), pool) for i in range(count)]
            mapper = pool_workers.imap if pool_workers is not None else map
            made = list(tqdm(mapper(_make_biased, jobs), total=count, desc=f"synth {split}", unit="utt"))
            cuts = CutSet.from_cuts(corpus.to_cut(meta) for meta, _ in made)
            write_cuts(cuts, out / f"cuts_{split}.jsonl.gz")
            lines = [json.dumps({"id": meta.cut_id, "biased": rare,
                                 "distractors": distractors(seed, meta.cut_id, rare, words)})
                     for meta, rare in made]
            lists_path(out, split).write_text("\n".join(lines) + "\n", encoding="utf-8")
            result[split] = cuts
    finally:
        if pool_workers is not None:
            pool_workers.close()
            pool_workers.join()
    return result
