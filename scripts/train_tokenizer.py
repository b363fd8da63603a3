"""Train a tokenizer on a manifest's transcripts.

id 0 = <blank>, id 1 = <unk>, last id = <sos/eos>; all read back from the written file.

Usage:
  python scripts/train_tokenizer.py data/synth/cuts_train.jsonl.gz data/synth/tokenizer --vocab-size 256
  python scripts/train_tokenizer.py data/synth/cuts_train.jsonl.gz /tmp/uni --model-type unigram --vocab-size 500
  python scripts/train_tokenizer.py data/aishell/cuts_train.jsonl.gz data/aishell/tokenizer --units char
"""

from __future__ import annotations

import argparse

from lhotse import CutSet

from asr.data.tokenizer import load_tokenizer, train_sentencepiece, write_char_units


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("cuts", help="CutSet manifest (jsonl.gz) whose supervision texts are the training text")
    p.add_argument("out_dir")
    p.add_argument("--units", default="spm", choices=["spm", "char"])
    p.add_argument("--vocab-size", type=int, default=256, help="total ids incl. <blank>, <unk>, <sos/eos>")
    p.add_argument("--model-type", default="bpe", choices=["unigram", "bpe"])
    args = p.parse_args(argv)
    texts = (" ".join(s.text for s in c.supervisions) for c in CutSet.from_jsonl_lazy(args.cuts))  # streamed
    if args.units == "char":
        write_char_units(texts, args.out_dir)
    else:
        train_sentencepiece(texts, args.out_dir, args.vocab_size, args.model_type)
    tok = load_tokenizer(args.out_dir)
    print(f"{type(tok).__name__}: vocab_size={tok.vocab_size} blank={tok.blank_id} unk={tok.unk_id} "
          f"sos/eos={tok.sos_eos_id} -> {args.out_dir}")


if __name__ == "__main__":
    main()
