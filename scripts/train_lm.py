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
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asr.data.tokenizer import load_tokenizer  # noqa: E402
from asr.lm import (DEFAULT_LM_ORDER, lm_path, save_arpa, save_word_lm, token_names, train_token_lm,  # noqa: E402
                    train_word_lm, word_lm_path)


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
    tok_dir = None
    if args.tokenizer:
        tok_path = Path(args.tokenizer)
        tok_dir = tok_path if tok_path.is_dir() else tok_path.parent
    start = time.perf_counter()
    with text.open(encoding="utf-8") as f:
        # the token LM counts the lines as they are read; the word LM keeps them once, to list its words first
        lines = (line.strip() for line in f)
        if args.words:
            out = Path(args.out) if args.out else word_lm_path(tok_dir.parent, args.order)
            lm, names = train_word_lm(lines, args.order)
            save_word_lm(lm, names, out)
            unit = f"{len(names) - 1} words (<unk> included)"
        else:
            tok = load_tokenizer(tok_path)
            out = Path(args.out) if args.out else lm_path(tok_dir.parent, args.order)
            lm = train_token_lm(lines, tok, args.order)
            save_arpa(lm, out, token_names(tok))
            unit = f"{tok.vocab_size} tokens"
    print(f"{args.order}-gram over {unit}: n-grams by order {lm.num_ngrams()} -> {out} "
          f"({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
