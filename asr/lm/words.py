"""Word n-gram LM and lexicon, fused into a token-level search.

The token LM (asr.lm.ngram) can spell anything, which is also its weakness: on a voice
the acoustic model half-hears, the beam fills with strings that are no word at all
("warngget", "itcising"). This module scores hypotheses the way a lexicon-plus-word-LM
decoder (a Kaldi or Wenet TLG graph, pyctcdecode's word LM) does, but token by token, so
it plugs into the same CTC prefix beam search and attention rescoring as the token LM:

- a word is a run of tokens from one that starts with the word marker "▁" (sentencepiece
  pieces, or the character tokenizer's space unit) to the next;
- when a word ends (the next word starts, or the sentence ends), it is scored with the word
  n-gram: ``weight * log P(word | previous words) + word_bonus``; a word the LM does not
  know is scored as ``<unk>``;
- a word outside the lexicon pays ``oov_penalty`` once: the moment its letters stop being
  the beginning of any lexicon word, or when it ends if they never did ("th"). So an
  out-of-vocabulary word costs a fixed amount, it is not forbidden: names a lexicon lacks
  can still be spelled.

Hypotheses inside a word pay nothing until the word ends; all hypotheses pay for every word
they complete, so the totals of complete sentences are comparable. The lexicon is the word
LM's vocabulary.

Pure Python, like the rest of asr.lm.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Sequence
from pathlib import Path

from asr.lm.ngram import NgramLM, _text_lines, load_arpa, save_arpa, train_kneser_ney

WORD_MARKER = "\u2581"  # "▁": starts a word in both tokenizers' pieces
UNK_WORD = "<unk>"
DEFAULT_WORD_LM_ORDER = 3
# Chosen on the eSpeak dev split with the token LM at its defaults (data/results/hotwords_lm.md).
DEFAULT_WORD_LM_WEIGHT = 0.3
DEFAULT_WORD_BONUS = 1.0
DEFAULT_OOV_PENALTY = 10.0


def _prefixes(words: Iterable[str]) -> set[str]:
    """Every non-empty beginning of every word (the words themselves included)."""
    return {w[:k] for w in words for k in range(1, len(w) + 1)}


def word_lm_path(data_dir: str | Path, order: int = DEFAULT_WORD_LM_ORDER) -> Path:
    """Where scripts/prepare_data.py writes a corpus's word LM."""
    return Path(data_dir) / "lm" / f"words_{order}gram.arpa.gz"


def train_word_lm(texts: Iterable[str], order: int) -> tuple[NgramLM, list[str]]:
    """A Kneser-Ney word n-gram over whitespace-split ``texts`` (one sentence each; empty lines skipped).

    Returns:
        (lm, names): ``names[i]`` is word id i's spelling; id 0 is ``<unk>`` (never seen in
        training, so it gets the uniform floor's share), the last id ends a sentence.
    """
    sentences = [t.split() for t in texts if t.strip()]
    vocab = sorted({w for s in sentences for w in s} - {UNK_WORD})
    names = [UNK_WORD, *vocab, "</s>"]
    ids = {w: i for i, w in enumerate(names)}
    eos_id = len(names) - 1
    lm = train_kneser_ney(([ids[w] for w in s] for s in sentences), order, range(eos_id), eos_id)
    return lm, names


def save_word_lm(lm: NgramLM, names: Sequence[str], path: str | Path) -> Path:
    """Write the word LM as ARPA (the words are its symbols)."""
    return save_arpa(lm, path, names)


def arpa_vocabulary(path: str | Path) -> list[str]:
    """The unigram symbols of an ARPA file, file order, <s> and </s> left out."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"word language model not found: {path}")
    words, in_unigrams = [], False
    for line in _text_lines(path):
        line = line.strip()
        if line.startswith("\\"):
            if in_unigrams:
                break
            in_unigrams = line == "\\1-grams:"
            continue
        if in_unigrams and line:
            fields = line.split()
            if len(fields) < 2:
                raise ValueError(f"{path}: malformed unigram line {line!r}")
            if fields[1] not in ("<s>", "</s>"):
                words.append(fields[1])
    if not words:
        raise ValueError(f"{path}: no unigrams (not an ARPA language model?)")
    return words


def word_names(path: str | Path, words: Sequence[str]) -> list[str]:
    """The id -> word table of a word LM with vocabulary ``words``: they, then </s>; refused without <unk>."""
    if UNK_WORD not in words:
        raise ValueError(f"{path}: the word LM has no {UNK_WORD} unigram, so a word outside its vocabulary could "
                         f"not be scored; build it with scripts/train_lm.py --words or add <unk>")
    return [*words, "</s>"]


def load_word_lm(path: str | Path) -> tuple[NgramLM, list[str]]:
    """(lm, names) from an ARPA word LM, ours or another tool's (its words become the lexicon)."""
    names = word_names(path, arpa_vocabulary(path))
    return load_arpa(path, names), names


class WordFusion:
    """A word n-gram and its lexicon, scored token by token (see the module docstring).

    Args:
        lm, words: the word model and the spelling of each of its ids (``load_word_lm``).
        pieces: the ASR tokenizer's piece for every token id (``asr.lm.token_names``).
        weight: scale of the word log-probabilities (>= 0).
        word_bonus: added per completed word (any finite value): against the LM's pull to fewer words.
        oov_penalty: paid once by each word that leaves the lexicon (>= 0; 0 turns the lexicon off).
    """

    def __init__(self, lm: NgramLM, words: Sequence[str], pieces: Sequence[str], weight: float,
                 word_bonus: float = 0.0, oov_penalty: float = 0.0) -> None:
        if not (math.isfinite(weight) and weight >= 0):
            raise ValueError(f"word LM weight ({weight}) must be a finite number >= 0.")
        if not math.isfinite(word_bonus):
            raise ValueError(f"word_bonus ({word_bonus}) must be finite.")
        if not (math.isfinite(oov_penalty) and oov_penalty >= 0):
            raise ValueError(f"oov_penalty ({oov_penalty}) must be a finite number >= 0.")
        if not any(p.startswith(WORD_MARKER) for p in pieces):
            raise ValueError(f"no token starts with the word marker {WORD_MARKER!r}: the tokenizer does not mark "
                             f"word starts, so words cannot be scored")
        self.lm, self.weight, self.word_bonus, self.oov_penalty = lm, weight, word_bonus, oov_penalty
        self.words = list(words)
        self._ids = {w: i for i, w in enumerate(self.words) if i != lm.eos_id}
        self._unk_id = self._ids.get(UNK_WORD)
        if self._unk_id is None:
            raise ValueError(f"the word LM's vocabulary has no {UNK_WORD}")
        self._lexicon = {w for w in self._ids if w != UNK_WORD}
        self._prefixes = _prefixes(self._lexicon)
        # hotwords (with_words) beside the LM's own lexicon: kept apart so adding them copies nothing big
        self._extra_lexicon: frozenset[str] = frozenset()
        self._extra_prefixes: frozenset[str] = frozenset()
        # piece -> (starts a word, its letters)
        self._pieces = [(p.startswith(WORD_MARKER), p[len(WORD_MARKER):] if p.startswith(WORD_MARKER) else p)
                        for p in pieces]
        self._with_words: dict[frozenset[str], WordFusion] = {}  # the last few hotword lexicons

    def with_words(self, words: Iterable[str]) -> WordFusion:
        """This model with ``words`` in its lexicon too (hotwords pay no OOV penalty; the LM itself scores a
        word it never saw as ``<unk>``). Shares the LM; the last few word sets are kept."""
        words = frozenset(words) - self._lexicon - self._extra_lexicon
        if not words:
            return self
        hit = self._with_words.get(words)
        if hit is None:
            hit = copy.copy(self)
            hit._extra_lexicon = self._extra_lexicon | words
            hit._extra_prefixes = self._extra_prefixes | _prefixes(words)
            hit._with_words = {}
            if len(self._with_words) >= 16:
                self._with_words.clear()
            self._with_words[words] = hit
        return hit

    def settings(self) -> dict:
        return {"word_lm": {"order": self.lm.order, "words": len(self._ids), "weight": self.weight,
                            "word_bonus": self.word_bonus, "oov_penalty": self.oov_penalty}}

    def _state(self, history: Sequence[int]) -> tuple[tuple[int, ...], str]:
        """(ids of the last order - 1 completed words, or all if fewer; letters of the word in progress).

        Read backwards from the end, so the cost depends on the last few words, not on the
        prefix length (the beam asks this for every prefix and token of every frame).
        """
        context = self.lm.order - 1  # words before the one in progress that the LM looks at
        spans: list[str] = []  # the word in progress, then completed words, last first
        letters: list[str] = []
        for tok in reversed(history):
            starts, piece = self._pieces[tok]
            letters.append(piece)
            if starts:
                spans.append("".join(reversed(letters)))
                letters = []
                if sum(1 for w in spans[1:] if w) == context:
                    break
        else:
            if letters:  # the sentence's first word had no marker
                spans.append("".join(reversed(letters)))
        if not spans:
            return (), ""
        partial, done = spans[0], spans[1:]
        return tuple(self._ids.get(w, self._unk_id) for w in reversed(done) if w), partial

    def _complete(self, words: tuple[int, ...], partial: str) -> tuple[int, ...]:
        return (*words, self._ids.get(partial, self._unk_id)) if partial else words

    def _word_score(self, words: tuple[int, ...], partial: str) -> float:
        """What completing ``partial`` after ``words`` adds (0 when there is no partial word).

        A word that is no lexicon word but still the beginning of one ("th") pays the OOV
        penalty here; one that left the lexicon earlier has paid it already.
        """
        if not partial:
            return 0.0
        word_id = self._ids.get(partial, self._unk_id)
        score = self.weight * self.lm.logprob(words, word_id) + self.word_bonus
        if not self._in_lexicon(partial) and self._is_prefix(partial):
            score -= self.oov_penalty
        return score

    def _leaves_lexicon(self, before: str, after: str) -> bool:
        """Whether the partial word ``after`` is the first that no lexicon word begins with."""
        return bool(after) and not self._is_prefix(after) and (not before or self._is_prefix(before))

    def _in_lexicon(self, word: str) -> bool:
        return word in self._lexicon or word in self._extra_lexicon

    def _is_prefix(self, letters: str) -> bool:
        """Whether some lexicon word (hotwords included) begins with ``letters``."""
        return letters in self._prefixes or letters in self._extra_prefixes

    def token_score(self, history: Sequence[int], token: int) -> float:
        """What appending ``token`` after ``history`` adds: the word it ends, if any, and the OOV penalty."""
        words, partial = self._state(history)
        starts, letters = self._pieces[token]
        if starts:
            score = self._word_score(words, partial)
            if self._leaves_lexicon("", letters):
                score -= self.oov_penalty
            return score
        return -self.oov_penalty if self._leaves_lexicon(partial, partial + letters) else 0.0

    def end_score(self, tokens: Sequence[int]) -> float:
        """What ending the sentence after ``tokens`` adds: its last word and </s>."""
        words, partial = self._state(tokens)
        score = self._word_score(words, partial)
        return score + self.weight * self.lm.logprob(self._complete(words, partial), self.lm.eos_id)

    def sentence_score(self, tokens: Sequence[int]) -> float:
        """The whole contribution for a complete hypothesis: its token scores and its end score."""
        return sum(self.token_score(tokens[:i], tok) for i, tok in enumerate(tokens)) + self.end_score(tokens)
