"""Train a token n-gram LM (interpolated Kneser-Ney) from a text file, for decoding with --lm,
or with --words a word n-gram whose vocabulary is the lexicon, for decoding with --word-lm.

Usage:
    python scripts/train_lm.py --text my_sentences.txt --tokenizer data/synth/tokenizer
    python scripts/train_lm.py --text train.txt --tokenizer data/libri/tokenizer --order 5 --out data/libri/lm/5gram.arpa.gz
    python scripts/train_lm.py --text train.txt --words --order 3 --out data/libri/lm/words_3gram.arpa.gz

One sentence per line, normalized the way the corpus's transcripts are (the tokenizer
turns it into the ASR model's token ids). scripts/prepare_data.py already writes
<data dir>/lm/4gram.arpa.gz and lm/words_3gram.arpa.gz from the train transcripts; this script is for other text
(more in-domain sentences, another order). Memory grows with the distinct n-grams
(Python dictionaries, roughly 200 bytes each).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asr.lm import DEFAULT_LM_ORDER  # noqa: E402
from asr.lm.from_text import train_lm_from_text  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--text", required=True, help="text file, one sentence per line")
    p.add_argument("--tokenizer", help="the ASR model's tokenizer (.model, units.txt or their folder); needed "
                   "for a token LM")
    p.add_argument("--words", action="store_true", help="a word LM (its vocabulary is the decoding lexicon)")
    p.add_argument("--order", type=int, default=DEFAULT_LM_ORDER, help=f"n (default {DEFAULT_LM_ORDER})")
    p.add_argument("--out", help="ARPA file to write (.gz compresses; default <tokenizer folder>/../lm/<n>gram.arpa.gz, "
                   "or words_<n>gram.arpa.gz with --words)")
    args = p.parse_args(argv)
    if args.order < 1:
        p.error(f"--order ({args.order}) must be >= 1")
    text = Path(args.text)
    if not text.is_file():
        p.error(f"--text {text} is not a file")
    if not args.tokenizer and not (args.words and args.out):
        p.error("--tokenizer is needed (a word LM without it needs --out)")
    train_lm_from_text(text, args.order, args.tokenizer, args.words, args.out)


if __name__ == "__main__":
    main()
