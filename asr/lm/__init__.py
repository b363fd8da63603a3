"""Language models for decoding: a token n-gram model, a word n-gram with its lexicon, shallow fusion.

Pure Python (no torch): the streaming recognizer and the server import it as
they import the searches. The token model's "words" are the ASR model's token ids, so
tokenizer and token LM must come from the same prepare run; the ARPA file
names tokens by their pieces, and loading it with another tokenizer fails with a
clear message instead of scoring the wrong ids. The word LM (asr.lm.words) names
words, so any tokenizer that marks word starts can use it.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from pathlib import Path

from asr.lm.fusion import Fusion, FusionSum, ShallowFusion
from asr.lm.ngram import NgramLM, load_arpa, save_arpa, train_kneser_ney
from asr.lm.words import (DEFAULT_OOV_PENALTY, DEFAULT_WORD_BONUS, DEFAULT_WORD_LM_ORDER, DEFAULT_WORD_LM_WEIGHT,
                          WordFusion, load_word_lm, save_word_lm, train_word_lm, word_lm_path)

__all__ = ["DEFAULT_LENGTH_BONUS", "DEFAULT_LM_ORDER", "DEFAULT_LM_WEIGHT", "DEFAULT_OOV_PENALTY",
           "DEFAULT_WORD_BONUS", "DEFAULT_WORD_LM_ORDER", "DEFAULT_WORD_LM_WEIGHT", "Fusion", "FusionSum", "NgramLM",
           "ShallowFusion", "WordFusion", "add_lm_arguments", "fusion_from_args", "lm_argv", "lm_path", "load_arpa",
           "load_token_lm", "load_word_lm", "save_arpa", "save_word_lm", "token_names", "train_kneser_ney",
           "train_token_lm", "train_word_lm", "word_lm_path"]

# Chosen on the eSpeak dev split (never on flite) with the quickstart's models; see the README.
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


# (flag, default, help) of the numeric options of both language models
_SCORE_OPTIONS = (
    ("--lm-weight", DEFAULT_LM_WEIGHT, "token LM log-probability scale (tuned on eSpeak dev)"),
    ("--length-bonus", DEFAULT_LENGTH_BONUS, "score per token with the token LM, against its pull towards short "
                                             "outputs"),
    ("--word-lm-weight", DEFAULT_WORD_LM_WEIGHT, "word LM log-probability scale (tuned on eSpeak dev with --lm at "
                                                 "its defaults)"),
    ("--word-bonus", DEFAULT_WORD_BONUS, "score per completed word with the word LM"),
    ("--oov-penalty", DEFAULT_OOV_PENALTY, "paid once by a word that leaves the word LM's lexicon (0: no lexicon)"),
)


def add_lm_arguments(parser: argparse.ArgumentParser) -> None:
    """``--lm``, ``--lm-weight``, ``--length-bonus`` (token LM) and ``--word-lm``, ``--word-lm-weight``,
    ``--word-bonus``, ``--oov-penalty`` (word LM and lexicon): the same options in every decoding script."""
    parser.add_argument("--lm", help="token n-gram LM (ARPA) to fuse into the CTC beam and the rescoring, e.g. "
                        f"{lm_path('data/synth')} (scripts/prepare_data.py writes it)")
    parser.add_argument("--word-lm", help="word n-gram LM (ARPA with <unk>) whose vocabulary is the lexicon, e.g. "
                        f"{word_lm_path('data/synth')}; alone or beside --lm")
    for flag, default, text in _SCORE_OPTIONS:
        parser.add_argument(flag, type=float, default=default, help=f"{text} (default {default})")


def lm_argv(args: argparse.Namespace) -> list[str]:
    """The command-line options that give another script the LMs ``args`` asks for (``add_lm_arguments``'
    flags, the numeric ones from the same table); empty without ``--lm`` and ``--word-lm``."""
    paths = [(flag, getattr(args, flag[2:].replace("-", "_"))) for flag in ("--lm", "--word-lm")]
    argv = [part for flag, path in paths if path for part in (flag, str(path))]
    if not argv:
        return []
    return argv + [part for flag, _, _ in _SCORE_OPTIONS
                   for part in (flag, str(getattr(args, flag[2:].replace("-", "_"))))]


def fusion_from_args(args: argparse.Namespace, tokenizer) -> Fusion | None:
    """The fusion ``add_lm_arguments``' options ask for: the token LM, the word LM, both (their scores add),
    or None without ``--lm`` and ``--word-lm``. Bad files or values raise ValueError / FileNotFoundError
    with the reason."""
    parts: list[Fusion] = []
    if args.lm:
        parts.append(ShallowFusion(load_token_lm(args.lm, tokenizer), args.lm_weight, args.length_bonus))
    if getattr(args, "word_lm", None):
        word_lm, words = load_word_lm(args.word_lm)
        parts.append(WordFusion(word_lm, words, token_names(tokenizer), args.word_lm_weight, args.word_bonus,
                                args.oov_penalty))
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else FusionSum(tuple(parts))
