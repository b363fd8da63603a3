"""Prepare a corpus for training (``scripts/prepare_data.py``): manifests, tokenizer, token and word
LMs, CMVN; for the synth corpus also the optional evaluation splits (length probes, flite's voices,
capture paths, the biasing benchmark).

:class:`PrepareOptions` holds what the script's options say (the same names and defaults) and
refuses combinations that have no meaning; :func:`prepare_corpus` does the work. A source that is
missing or unreadable, or a step whose input is missing, is a one-line :class:`PrepareError`.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from asr.data.cmvn import compute_cmvn, save_cmvn
from asr.data.dataset import cut_text
from asr.data.importers import IMPORTERS, CorpusFormatError
from asr.data.manifest import manifest_stats, read_cuts, write_cuts
from asr.data.shar import shard_paths, write_shar
from asr.data.tokenizer import load_tokenizer, train_sentencepiece, write_char_units
from asr.lm import (DEFAULT_LM_ORDER, DEFAULT_WORD_LM_ORDER, lm_path, save_arpa, save_word_lm, token_names,
                    train_token_lm, train_word_lm, word_lm_path)
# corpus before capture: the two import each other, and only this order completes both
from asr.synth.corpus import SynthConfig, build_synth_corpus  # isort: skip
from asr.synth.profiles import DEFAULT_PROFILE, PROFILES  # isort: skip
from asr.synth.capture import CAPTURE_SOURCES, build_capture_split, capture_file  # isort: skip
from asr.synth.probes import DEV_PROBE_FILE, PROBE_FILE, build_probe_set
from asr.synth.noise_bank import NOISE_BANK_MANIFEST, build_noise_bank
from asr.synth.xengine import INSTALL_HINT, XENGINE_SOURCES, build_xengine_split, flite_path, xengine_file

CORPORA = ("synth", *IMPORTERS)
UNITS = ("spm", "char")
MODEL_TYPES = ("unigram", "bpe")


class PrepareError(Exception):
    """A corpus that cannot be prepared as asked: one line saying why."""


@dataclass(frozen=True)
class PrepareOptions:
    """``scripts/prepare_data.py``'s options (see its --help); ``src``: a corpus root (librispeech,
    aishell) or SPLIT=PATH entries; ``data_dir`` None: ``data/<corpus>``."""

    corpus: str = "synth"
    src: Sequence[str] = field(default_factory=tuple)
    data_dir: str | None = None
    force: bool = False
    seed: int = 0
    train_hours: float = 18.0
    dev_hours: float = 0.25
    test_hours: float = 0.25
    long_hours: float = 0.25
    workers: int = 2
    profile: str = DEFAULT_PROFILE
    probes: bool = False
    dev_probes: bool = False
    xengine: bool = False
    biasing: bool = False
    biasing_only: bool = False
    biasing_dir: str | None = None
    capture: bool = False
    capture_only: bool = False
    units: str = "spm"
    vocab_size: int = 256
    model_type: str = "bpe"
    lm_order: int = DEFAULT_LM_ORDER
    word_lm_order: int = DEFAULT_WORD_LM_ORDER
    shar_dir: str | None = None
    shard_size: int = 1000
    cmvn_max_utts: int = 8000

    def __post_init__(self) -> None:
        for name, value, valid in (("corpus", self.corpus, CORPORA), ("profile", self.profile, PROFILES),
                                   ("units", self.units, UNITS), ("model-type", self.model_type, MODEL_TYPES)):
            if value not in valid:
                raise ValueError(f"--{name} {value!r}; valid: {', '.join(valid)}")
        if self.lm_order < 0:
            raise ValueError(f"--lm-order ({self.lm_order}) must be >= 0 (0: no LM)")
        if self.word_lm_order < 0:
            raise ValueError(f"--word-lm-order ({self.word_lm_order}) must be >= 0 (0: no word LM)")
        if (self.biasing or self.biasing_only) and self.corpus != "synth":
            raise ValueError(f"--biasing builds sentences of the synth corpus; it has no meaning for --corpus "
                             f"{self.corpus}")
        if (self.capture or self.capture_only) and self.corpus != "synth":
            raise ValueError("--capture passes the synth corpus's test and dev utterances through capture paths; "
                             f"it has no meaning for --corpus {self.corpus}")
        if self.xengine and self.corpus != "synth":
            raise ValueError("--xengine renders the synth corpus's test sentences with another engine; it has no "
                             f"meaning for --corpus {self.corpus}")


def import_corpus(args: PrepareOptions, out: Path) -> None:
    """Run an importer and write cuts_<split>.jsonl.gz files (train/dev/test aliases included)."""
    if not args.src:
        raise PrepareError(f"--corpus {args.corpus} needs --src")
    skipped: Counter = Counter()
    try:
        splits = _import_splits(args, skipped)
    except (OSError, CorpusFormatError) as err:  # a missing or unreadable source, one in a layout not read here
        raise PrepareError(f"prepare_data: {err}") from err
    for split, cuts in splits.items():
        path = write_cuts(cuts, out / f"cuts_{split}.jsonl.gz")
        print(f"{split:>12}: {len(cuts):7d} cuts  {sum(c.duration for c in cuts) / 3600:8.2f} h -> {path}")
    if skipped:
        print(f"import skipped entries: {dict(skipped)}")


def _import_splits(args: PrepareOptions, skipped: Counter) -> dict:
    """split -> CutSet of every --src (the importer's bad entries counted in ``skipped``)."""
    importer = IMPORTERS[args.corpus]
    if args.corpus in ("librispeech", "aishell"):
        splits = importer(args.src[0], skipped)
        # the generic names the data module reads by default
        aliases = {
            "train": sorted(s for s in splits if s.startswith("train")),
            "dev": [s for s in ("dev-clean", "dev", "dev-other") if s in splits][:1],
            "test": [s for s in ("test-clean", "test", "test-other") if s in splits][:1],
        }
        for alias, names in aliases.items():
            if names and alias not in splits:
                splits[alias] = sum((splits[n] for n in names[1:]), start=splits[names[0]])
    else:
        splits = {}
        for entry in args.src:
            split, _, path = entry.rpartition("=")
            splits[split or "train"] = importer(path, skipped)
    return splits


def prepare_xengine(out: Path, force: bool) -> None:
    """The flite-read test and dev splits, unless they exist (or flite is missing: then say how to get it)."""
    for split in XENGINE_SOURCES:
        path = out / xengine_file(split)
        if path.is_file() and not force:
            print(f"xengine: {path} exists (--force rebuilds it)")
            continue
        if flite_path() is None:
            print(f"xengine: skipped, flite is not installed: {INSTALL_HINT}")
            return
        result = build_xengine_split(out, source_split=split)
        skipped = f", skipped {dict(result.skipped)}" if result.skipped else ""
        print(f"xengine ({split} sentences): {len(result.cuts)} cuts, {result.hours:.2f} h{skipped} -> {path}")


def prepare_biasing(args: PrepareOptions, out: Path) -> None:
    """The biasing benchmark into --biasing-dir (default ``out``), its rare words checked against out's train text."""
    from asr.synth.biasing import build_biasing_sets

    train_path = out / "cuts_train.jsonl.gz"
    if not train_path.is_file():
        raise PrepareError(f"--biasing needs the train transcripts: {train_path} is missing (build the corpus first)")
    dest = Path(args.biasing_dir or out)
    built = build_biasing_sets(dest, (cut_text(c) for c in read_cuts(train_path, out, lazy=True)), seed=args.seed,
                               workers=args.workers)
    for split, cuts in built.items():
        print(f"{split}: {len(cuts)} cuts, {sum(c.duration for c in cuts) / 3600:.2f} h -> {dest}")


def prepare_capture(out: Path, seed: int, force: bool) -> None:
    """The capture splits of the test and dev utterances, unless they exist."""
    for split in CAPTURE_SOURCES:
        path = out / capture_file(split)
        if path.is_file() and not force:
            print(f"capture: {path} exists (--force rebuilds it)")
            continue
        result = build_capture_split(out, source_split=split, seed=seed)
        skipped = f", skipped {dict(result.skipped)}" if result.skipped else ""
        print(f"capture ({split} utterances): {len(result.cuts)} cuts {dict(sorted(result.families.items()))}"
              f"{skipped} -> {path}")


def prepare_corpus(args: PrepareOptions) -> Path:
    """Build or import the corpus ``args`` describes, then its tokenizer, LMs and CMVN; returns its folder."""
    out = Path(args.data_dir or f"data/{args.corpus}")
    started = time.perf_counter()
    if args.biasing_only or args.capture_only:
        # Only what was asked: the corpus, its tokenizer, LMs and CMVN stay as they are.
        if args.biasing_only:
            prepare_biasing(args, out)
        if args.capture_only:
            prepare_capture(out, args.seed, args.force)
        print(f"done in {time.perf_counter() - started:.1f} s")
        return out
    if args.corpus == "synth":
        cfg = SynthConfig(str(out), args.seed, args.train_hours, args.dev_hours, args.test_hours,
                          args.long_hours, args.workers, args.profile)
        build_synth_corpus(cfg, force=args.force)
        if args.force or not (out / NOISE_BANK_MANIFEST).is_file():
            bank = read_cuts(build_noise_bank(out, args.seed))
            print(f"noise bank: {len(bank)} clips, {sum(c.duration for c in bank) / 60:.1f} min "
                  f"-> {out / NOISE_BANK_MANIFEST} (data.background.noise_cuts)")
        if args.probes and (args.force or not (out / PROBE_FILE).is_file()):
            probes = build_probe_set(out, seed=args.seed, workers=args.workers)
            print(f"probe: {len(probes)} passages, {sum(c.duration for c in probes) / 3600:.2f} h -> {out / PROBE_FILE}")
        if args.dev_probes and (args.force or not (out / DEV_PROBE_FILE).is_file()):
            probes = build_probe_set(out, seed=args.seed, workers=args.workers, voices="dev")
            print(f"dev probe: {len(probes)} passages, {sum(c.duration for c in probes) / 3600:.2f} h "
                  f"-> {out / DEV_PROBE_FILE}")
        if args.xengine:
            prepare_xengine(out, args.force)
        if args.biasing:
            prepare_biasing(args, out)
        if args.capture:
            prepare_capture(out, args.seed, args.force)
    else:
        out.mkdir(parents=True, exist_ok=True)
        import_corpus(args, out)

    # lazy: tokenizer text and CMVN cuts are streamed, memory stays flat in the corpus size
    train_path = out / "cuts_train.jsonl.gz"
    if not train_path.is_file():
        # A test-only corpus is valid: a checkpoint carries its own tokenizer, fbank options and CMVN.
        print(f"no train split: tokenizer, LMs and CMVN are built from one, so none were made; decode a split "
              f"with: python scripts/decode.py --checkpoint CKPT --cuts {out}/cuts_<split>.jsonl.gz")
        print(f"manifests: {sorted(p.name for p in out.glob('cuts_*.jsonl.gz'))} in {out}")
        print(f"done in {time.perf_counter() - started:.1f} s")
        return out
    train = read_cuts(train_path, out, lazy=True)
    texts = (cut_text(c) for c in train)
    tok_dir = out / "tokenizer"
    if args.units == "char":
        write_char_units(texts, tok_dir)
    else:
        train_sentencepiece(texts, tok_dir, args.vocab_size, args.model_type)
    tok = load_tokenizer(tok_dir)
    print(f"tokenizer: {type(tok).__name__} vocab_size={tok.vocab_size} blank={tok.blank_id} unk={tok.unk_id} "
          f"sos/eos={tok.sos_eos_id} -> {tok_dir}")
    # One pass over the manifest for both LMs: the transcripts are small beside the n-gram tables built from them.
    texts = [cut_text(c) for c in train] if args.lm_order or args.word_lm_order else []
    if args.lm_order:
        # ~5 s for the embedded corpus; memory and time grow with the distinct n-grams of the train text
        print(f"lm: counting {args.lm_order}-grams of the train transcripts ...", flush=True)
        lm = train_token_lm(texts, tok, args.lm_order)
        path = save_arpa(lm, lm_path(out, args.lm_order), token_names(tok))
        print(f"lm: {args.lm_order}-gram over tokens, {sum(lm.num_ngrams())} n-grams -> {path}")
    if args.word_lm_order:
        word_lm, words = train_word_lm(texts, args.word_lm_order)
        path = save_word_lm(word_lm, words, word_lm_path(out, args.word_lm_order))
        print(f"lm: {args.word_lm_order}-gram over {len(words) - 1} words (the decoding lexicon), "
              f"{sum(word_lm.num_ngrams())} n-grams -> {path}")

    stats = compute_cmvn(train, max_cuts=args.cmvn_max_utts or None, num_workers=args.workers,
                         total=manifest_stats(train_path).cuts)
    cmvn_path = save_cmvn(stats, out / "cmvn.json")
    print(f"cmvn: {stats['frames']} frames ({stats['skipped']} cuts unreadable) -> {cmvn_path}")
    print(f"manifests: {sorted(p.name for p in out.glob('cuts_*.jsonl.gz'))} in {out}")
    if args.shar_dir:
        shar = write_shar(read_cuts(train_path, out, lazy=True), args.shar_dir, args.shard_size)
        print(f"shar: {shar.cuts} cuts, {shar.hours:.2f} h in {len(shard_paths(args.shar_dir)['cuts'])} shards "
              f"-> {args.shar_dir}")
    print(f"done in {time.perf_counter() - started:.1f} s")
    return out
