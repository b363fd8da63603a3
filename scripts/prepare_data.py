"""Prepare a corpus for training: manifests, tokenizer, token LM, CMVN.

Default: synthesize the embedded eSpeak NG corpus into data/synth/ (splits that
already exist are kept unless --force), train a sentencepiece BPE tokenizer
(vocab 256) into data/synth/tokenizer/, a Kneser-Ney token 4-gram of the train
transcripts into data/synth/lm/4gram.arpa.gz (for decoding with --lm; the train
split's text only), compute global CMVN into data/synth/cmvn.json.

Why BPE by default: on a small, template-made corpus a 256-piece unigram model
spends its pieces on long frequent words ("▁dishwasher", "▁copenhagen") and
spells everything else letter by letter ("lesson" -> ▁ l es s o n), so short
rare single-letter pieces carry most words. BPE merges frequent pairs into
compositional pieces (▁l ess on), every one seen often in training; measured on
the synth train split: 7.8 vs 8.7 tokens/s, and the quickstart's dev WER fell
faster.

Usage:
  python scripts/prepare_data.py                              # data/synth, 18 h train (~5 min)
  python scripts/prepare_data.py --train-hours 0.05 --data-dir /tmp/tiny
  python scripts/prepare_data.py --units char                 # char units instead of sentencepiece
  python scripts/prepare_data.py --probes                     # + the length probe set (5-160 s, for the ablation)
  python scripts/prepare_data.py --dev-probes                 # + its dev version (dev voices, for tuning)
  python scripts/prepare_data.py --xengine                    # + test sentences read by flite (evaluation only)
  python scripts/prepare_data.py --biasing                    # + the hotword biasing benchmark (rare words)
  python scripts/prepare_data.py --biasing-only --biasing-dir data/synth_biasing   # it alone, from data/synth
  python scripts/prepare_data.py --capture                    # + test and dev through browser/network capture paths
  python scripts/prepare_data.py --capture-only --data-dir data/synth   # just those two splits, nothing else
  python scripts/prepare_data.py --corpus librispeech --src /corpora/LibriSpeech --data-dir data/libri
  python scripts/prepare_data.py --corpus aishell --src /corpora/aishell --data-dir data/aishell --units char
  python scripts/prepare_data.py --corpus librispeech --src /corpora/LibriSpeech --data-dir data/libri \
      --shar-dir data/libri/shar --shard-size 1000   # + the train split as Shar shards (data.shar_dir=...)
  python scripts/prepare_data.py --corpus wenet --src train=/x/train/data.list dev=/x/dev/data.list \
      test=/x/test/data.list --data-dir data/mycorpus          # same SPLIT=PATH form for kaldi / nemo
  python scripts/prepare_data.py --corpus kaldi --src test=/x/data/test --data-dir data/mytest
      # only the splits given: without a train split no tokenizer, LM or CMVN is built (a checkpoint has its own)
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

from asr.data.cmvn import compute_cmvn, save_cmvn
from asr.data.importers import IMPORTERS
from asr.data.dataset import cut_text
from asr.data.manifest import manifest_stats, read_cuts, write_cuts
from asr.synth.probes import DEV_PROBE_FILE, PROBE_FILE, build_probe_set
from asr.data.shar import shard_paths, write_shar
from asr.synth.corpus import DEFAULT_PROFILE, PROFILES, SynthConfig, build_synth_corpus
from asr.data.tokenizer import load_tokenizer, train_sentencepiece, write_char_units
from asr.synth.capture import CAPTURE_SOURCES, build_capture_split, capture_file
from asr.synth.xengine import INSTALL_HINT, XENGINE_SOURCES, build_xengine_split, flite_path, xengine_file
from asr.lm import (DEFAULT_LM_ORDER, DEFAULT_WORD_LM_ORDER, lm_path, save_arpa, save_word_lm, token_names,
                    train_token_lm, train_word_lm, word_lm_path)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", default="synth", choices=["synth", *IMPORTERS])
    p.add_argument("--src", nargs="+", default=[], help="corpus root (librispeech, aishell) or SPLIT=PATH entries")
    p.add_argument("--data-dir", default=None, help="output folder (default data/<corpus>)")
    p.add_argument("--force", action="store_true", help="rebuild synth splits that already exist")
    p.add_argument("--seed", type=int, default=0)
    # 18 h: synthesis is cheap (~300x real time on 2 cores, ~4 min) and the quickstart
    # trains for a fixed number of batches whatever the corpus size. At 6 h, 1,598 of
    # the 3,607 train word types occurred fewer than 5 times (243 of the 3,055 test
    # words, 7 never), and misspelled rare words were most of the test errors; at 18 h
    # it is 309 types (18 test words, none unseen).
    p.add_argument("--train-hours", type=float, default=18.0)
    p.add_argument("--dev-hours", type=float, default=0.25)
    p.add_argument("--test-hours", type=float, default=0.25)
    p.add_argument("--long-hours", type=float, default=0.25)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--profile", default=DEFAULT_PROFILE, choices=list(PROFILES),
                   help="synth only. clean: eSpeak's output as it is. padded: clean voices with "
                        "silence over a noise floor at both ends. voices: the train split gets 47 more "
                        "voice variants, wider rate/pitch, intonation range and word gaps. varied: voices plus "
                        "rooms, noise (coloured, babble), band limits, telephone channel, equalisers and levels "
                        "baked in (about 100x real time a core instead of 190x). mild: voices plus fewer and "
                        "lighter conditions. pico: 40%% of the train utterances read by SVOX Pico (pip install ttspico), its "
                        "two voices with formants scaled 0.78-1.05. pico_scaled: pico, and eSpeak's formants "
                        "scaled 0.85-1.15. neural: pico_scaled with 35%% of train read by neural voices "
                        "(Hibari, Piper's joe), so eSpeak 50%%, Pico 15%%. neural_major: the neural voices read "
                        "55%%. neural_hibari: neural with Hibari 80%% of the neural share. "
                        "neural_hibari_capture30 (default) / _capture60: neural_hibari with 30%% / 60%% of train "
                        "through capture paths (asr/synth/capture.py TRAIN_RANGES: other settings than --capture's). "
                        "*_passages: neural_hibari or its capture30 with 10%% of train read as passages of 2-5 "
                        "sentences (asr/synth/passages.py) "
                        "(asr/synth/corpus.py PROFILES). "
                        "Dev, test and long are clean eSpeak under every profile")
    p.add_argument("--probes", action="store_true",
                   help="synth only: also build the length probe set (cuts_probe.jsonl.gz: 20 passages each of "
                        "5, 10, 20, 40, 80, 160 s by held-out voices; ~1.75 h of audio, under a minute)")
    p.add_argument("--dev-probes", action="store_true",
                   help="synth only: also build the dev probe set (cuts_probe_dev.jsonl.gz: the same lengths read "
                        "by dev voices), for tuning training choices such as the passage share; the probe set "
                        "itself stays evaluation only")
    p.add_argument("--xengine", action="store_true",
                   help="also render the test and dev transcripts with flite's awb and rms voices into "
                        "cuts_xengine (test) and cuts_xengine_dev (another engine, for evaluation only; "
                        "skipped with a message when flite is absent)")
    p.add_argument("--biasing", action="store_true",
                   help="synth only: also build the hotword biasing benchmark (asr/synth/biasing.py: sentences with "
                        "rare words absent from the train transcripts, read by test and dev voices, with "
                        "per-utterance lists; ~360 utterances, a few minutes)")
    p.add_argument("--biasing-only", action="store_true",
                   help="build only the biasing benchmark from the existing corpus in --data-dir (nothing else "
                        "there is touched when --biasing-dir points elsewhere)")
    p.add_argument("--biasing-dir", default=None, help="where the biasing benchmark goes (default: the data dir)")
    p.add_argument("--capture", action="store_true",
                   help="also pass the test and dev utterances through capture paths (44.1/48 kHz round trips with "
                        "and without anti-aliasing, gain control, noise suppression, telephone, MP3, clipping; one "
                        "per utterance, fixed by the seed and cut id) into cuts_capture and cuts_capture_dev "
                        "(evaluation only; asr/synth/capture.py)")
    p.add_argument("--capture-only", action="store_true",
                   help="build only the capture splits of an existing corpus (no synthesis, tokenizer, LM or CMVN)")
    p.add_argument("--units", default="spm", choices=["spm", "char"])
    p.add_argument("--vocab-size", type=int, default=256)
    p.add_argument("--model-type", default="bpe", choices=["unigram", "bpe"])
    p.add_argument("--lm-order", type=int, default=DEFAULT_LM_ORDER,
                   help="order of the token n-gram LM built from the train transcripts (0: none)")
    p.add_argument("--word-lm-order", type=int, default=DEFAULT_WORD_LM_ORDER,
                   help="order of the word n-gram LM (and lexicon) built from the train transcripts (0: none)")
    p.add_argument("--shar-dir", default=None,
                   help="also write the train split as Lhotse Shar shards (cuts + flac audio) into this empty "
                        "folder; train from them with data.shar_dir=DIR")
    p.add_argument("--shard-size", type=int, default=1000, help="cuts per Shar shard (default 1000)")
    p.add_argument("--cmvn-max-utts", type=int, default=8000,
                   help="CMVN from N train cuts spread evenly over the manifest (default 8000, ~1.9M "
                        "frames of synth: the 80 means and variances are settled long before; 0 = all)")
    args = p.parse_args(argv)
    if args.lm_order < 0:
        p.error(f"--lm-order ({args.lm_order}) must be >= 0 (0: no LM)")
    if args.word_lm_order < 0:
        p.error(f"--word-lm-order ({args.word_lm_order}) must be >= 0 (0: no word LM)")
    if (args.biasing or args.biasing_only) and args.corpus != "synth":
        p.error(f"--biasing builds sentences of the synth corpus; it has no meaning for --corpus {args.corpus}")
    if (args.capture or args.capture_only) and args.corpus != "synth":
        p.error("--capture passes the synth corpus's test and dev utterances through capture paths; "
                f"it has no meaning for --corpus {args.corpus}")
    if args.xengine and args.corpus != "synth":
        p.error("--xengine renders the synth corpus's test sentences with another engine; it has no meaning "
                f"for --corpus {args.corpus}")
    return args


def import_corpus(args: argparse.Namespace, out: Path) -> None:
    """Run an importer and write cuts_<split>.jsonl.gz files (train/dev/test aliases included)."""
    if not args.src:
        sys.exit(f"--corpus {args.corpus} needs --src")
    skipped: Counter = Counter()
    try:
        splits = _import_splits(args, skipped)
    except OSError as err:  # a missing source file or folder (FileNotFoundError), an unreadable one
        sys.exit(f"prepare_data: {err}")
    for split, cuts in splits.items():
        path = write_cuts(cuts, out / f"cuts_{split}.jsonl.gz")
        print(f"{split:>12}: {len(cuts):7d} cuts  {sum(c.duration for c in cuts) / 3600:8.2f} h -> {path}")
    if skipped:
        print(f"import skipped entries: {dict(skipped)}")


def _import_splits(args: argparse.Namespace, skipped: Counter) -> dict:
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


def prepare_biasing(args: argparse.Namespace, out: Path) -> None:
    """The biasing benchmark into --biasing-dir (default ``out``), its rare words checked against out's train text."""
    from asr.synth.biasing import build_biasing_sets

    train_path = out / "cuts_train.jsonl.gz"
    if not train_path.is_file():
        sys.exit(f"--biasing needs the train transcripts: {train_path} is missing (build the corpus first)")
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


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    out = Path(args.data_dir or f"data/{args.corpus}")
    started = time.perf_counter()
    if args.biasing_only or args.capture_only:
        # Only what was asked: the corpus, its tokenizer, LMs and CMVN stay as they are.
        if args.biasing_only:
            prepare_biasing(args, out)
        if args.capture_only:
            prepare_capture(out, args.seed, args.force)
        print(f"done in {time.perf_counter() - started:.1f} s")
        return
    if args.corpus == "synth":
        cfg = SynthConfig(str(out), args.seed, args.train_hours, args.dev_hours, args.test_hours,
                          args.long_hours, args.workers, args.profile)
        build_synth_corpus(cfg, force=args.force)
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
        return
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


if __name__ == "__main__":
    main()
