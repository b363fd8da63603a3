"""Train an n-gram LM from a text file (one sentence per line) and write it where the decoders look.

``scripts/train_lm.py`` is this with its arguments checked: a token LM needs the ASR model's
tokenizer (its ids are the LM's "words"); a word LM's vocabulary is the text's words (the
decoding lexicon), and needs no tokenizer when the output path is given.
"""

from __future__ import annotations

import time
from pathlib import Path

from asr.lm.ngram import save_arpa
from asr.lm.token_lm import lm_path, token_names, train_token_lm
from asr.lm.words import save_word_lm, train_word_lm, word_lm_path


def train_lm_from_text(text: str | Path, order: int, tokenizer: str | Path | None = None, words: bool = False,
                       out: str | Path | None = None) -> Path:
    """Train an interpolated Kneser-Ney ``order``-gram over ``text``'s lines and write it; returns its path.

    ``out`` None: ``<tokenizer folder>/../lm/<n>gram.arpa.gz`` (``words_<n>gram.arpa.gz`` with ``words``).
    Prints one line: the order, the vocabulary, n-grams per order, the file and the time.
    """
    if order < 1:
        raise ValueError(f"order ({order}) must be >= 1")
    if tokenizer is None and not (words and out is not None):
        raise ValueError("a tokenizer is needed (a word LM without it needs an output path)")
    corpus_dir = None
    if tokenizer is not None:
        tok_path = Path(tokenizer)
        corpus_dir = (tok_path if tok_path.is_dir() else tok_path.parent).parent
    start = time.perf_counter()
    with Path(text).open(encoding="utf-8") as f:
        # the token LM counts the lines as they are read; the word LM keeps them once, to list its words first
        lines = (line.strip() for line in f)
        if words:
            path = Path(out) if out is not None else word_lm_path(corpus_dir, order)
            lm, names = train_word_lm(lines, order)
            save_word_lm(lm, names, path)
            unit = f"{len(names) - 1} words (<unk> included)"
        else:
            from asr.data.tokenizer import load_tokenizer  # sentencepiece: only a token LM needs it

            tok = load_tokenizer(tok_path)
            path = Path(out) if out is not None else lm_path(corpus_dir, order)
            lm = train_token_lm(lines, tok, order)
            save_arpa(lm, path, token_names(tok))
            unit = f"{tok.vocab_size} tokens"
    print(f"{order}-gram over {unit}: n-grams by order {lm.num_ngrams()} -> {path} "
          f"({time.perf_counter() - start:.1f} s)")
    return path
