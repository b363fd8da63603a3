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
  python scripts/prepare_data.py                              # data/synth, 18 h train (~20 min on 2 cores)
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

from asr.extras import MissingExtra
from asr.lm import DEFAULT_LM_ORDER, DEFAULT_WORD_LM_ORDER
from asr.prepare import CORPORA, MODEL_TYPES, UNITS, PrepareError, PrepareOptions, prepare_corpus
from asr.synth.profiles import DEFAULT_PROFILE, PROFILES


def parse_args(argv: list[str] | None = None) -> PrepareOptions:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", default="synth", choices=CORPORA)
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
                        "lighter conditions. pico: 40%% of the train utterances read by SVOX Pico (the synth extra), its "
                        "two voices with formants scaled 0.78-1.05. pico_scaled: pico, and eSpeak's formants "
                        "scaled 0.85-1.15. neural: pico_scaled with 35%% of train read by neural voices "
                        "(Hibari, Piper's joe), so eSpeak 50%%, Pico 15%%. neural_major: the neural voices read "
                        "55%%. neural_hibari: neural with Hibari 80%% of the neural share. "
                        "neural_hibari_capture30 (default) / _capture60: neural_hibari with 30%% / 60%% of train "
                        "through capture paths (asr/synth/capture.py TRAIN_RANGES: other settings than --capture's). "
                        "*_passages: neural_hibari or its capture30 with 10%% of train read as passages of 2-5 "
                        "sentences (asr/synth/passages.py) "
                        "(asr/synth/profiles.py PROFILES). "
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
    p.add_argument("--units", default="spm", choices=UNITS)
    p.add_argument("--vocab-size", type=int, default=256)
    p.add_argument("--model-type", default="bpe", choices=MODEL_TYPES)
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
    try:
        return PrepareOptions(**vars(args))
    except ValueError as err:
        p.error(str(err))


def main(argv: list[str] | None = None) -> None:
    try:
        prepare_corpus(parse_args(argv))
    except (PrepareError, MissingExtra) as err:
        sys.exit(str(err))


if __name__ == "__main__":
    main()
