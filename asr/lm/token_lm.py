"""The token n-gram LM over an ASR model's own ids: where a corpus keeps it, how it is trained from
transcripts through the tokenizer, and how an ARPA file is loaded against a tokenizer (refusing one
built for other units)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from asr.lm.ngram import NgramLM, load_arpa, train_kneser_ney

# Chosen on the eSpeak dev split (never on flite) with the quickstart's models (data/results/hotwords_lm.md).
DEFAULT_LM_ORDER = 4
DEFAULT_LM_WEIGHT = 0.7
DEFAULT_LENGTH_BONUS = 3.0


def lm_path(data_dir: str | Path, order: int = DEFAULT_LM_ORDER) -> Path:
    """Where scripts/prepare_data.py writes a corpus's token LM (it belongs to the folder's tokenizer)."""
    return Path(data_dir) / "lm" / f"{order}gram.arpa.gz"


def token_names(tokenizer) -> list[str]:
    """The printable name of every id of ``tokenizer`` (its pieces or characters), id order."""
    return [tokenizer.id_to_piece(i) for i in range(tokenizer.vocab_size)]


def train_token_lm(texts: Iterable[str], tokenizer, order: int) -> NgramLM:
    """A Kneser-Ney n-gram over ``tokenizer``'s ids of ``texts`` (one sentence each; empty lines skipped).

    Every id but <blank> and <sos/eos> may be predicted; <sos/eos> ends a sentence.
    """
    special = {tokenizer.blank_id, tokenizer.sos_eos_id}
    predictable = [i for i in range(tokenizer.vocab_size) if i not in special]
    sentences = (tokenizer.encode(t) for t in texts if t.strip())
    return train_kneser_ney(sentences, order, predictable, tokenizer.sos_eos_id)


def load_token_lm(path: str | Path, tokenizer) -> NgramLM:
    """An ARPA file written by :func:`save_arpa` with ``token_names(tokenizer)``."""
    names = token_names(tokenizer)
    lm = load_arpa(path, names)
    if lm.eos_id != tokenizer.sos_eos_id:
        raise ValueError(f"{path}: </s> maps to id {lm.eos_id}, the tokenizer's <sos/eos> is {tokenizer.sos_eos_id}")
    # A tokenizer with units the LM never had would load, then fail in the middle of a beam search.
    unscored = set(range(tokenizer.vocab_size)) - {tokenizer.blank_id} - {gram[0] for gram in lm.logprobs[0]}
    if unscored:
        shown = ", ".join(repr(names[i]) for i in sorted(unscored)[:5])
        raise ValueError(f"{path}: the tokenizer has {len(unscored)} units the language model cannot score "
                         f"({shown}); build the LM with this tokenizer (scripts/train_lm.py)")
    return lm
