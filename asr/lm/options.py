"""The decoding scripts' language-model options: one flag table for ``--lm`` and ``--word-lm`` and their
weights, parsed the same way by decode, stream, serve and bench_serve, and turned into a fusion."""

from __future__ import annotations

import argparse

from asr.lm.fusion import Fusion, FusionSum, ShallowFusion
from asr.lm.kenlm_backend import BACKENDS, load_kenlm_token_lm, load_kenlm_word_lm, use_kenlm
from asr.lm.token_lm import DEFAULT_LENGTH_BONUS, DEFAULT_LM_WEIGHT, lm_path, load_token_lm, token_names
from asr.lm.words import (DEFAULT_OOV_PENALTY, DEFAULT_WORD_BONUS, DEFAULT_WORD_LM_WEIGHT, WordFusion, load_word_lm,
                          word_lm_path)

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
    parser.add_argument("--lm-backend", choices=BACKENDS, default="auto",
                        help="who reads --lm / --word-lm: auto (a KenLM binary: KenLM; ARPA: ours), ours, or kenlm "
                             "(ARPA too; for LMs too large for ours; pip install kenlm)")


def lm_argv(args: argparse.Namespace) -> list[str]:
    """The command-line options that give another script the LMs ``args`` asks for (``add_lm_arguments``'
    flags, the numeric ones from the same table); empty without ``--lm`` and ``--word-lm``."""
    paths = [(flag, getattr(args, flag[2:].replace("-", "_"))) for flag in ("--lm", "--word-lm")]
    argv = [part for flag, path in paths if path for part in (flag, str(path))]
    if not argv:
        return []
    return argv + [part for flag, _, _ in _SCORE_OPTIONS
                   for part in (flag, str(getattr(args, flag[2:].replace("-", "_"))))] + [
        "--lm-backend", getattr(args, "lm_backend", "auto")]


def lm_options(argv: list[str] | tuple[str, ...]) -> argparse.Namespace:
    """``add_lm_arguments``' options read back from a command line (what :func:`lm_argv` gives), for code that
    keeps them as plain strings; a ValueError names an unknown option or a bad value."""

    class _Parser(argparse.ArgumentParser):
        def error(self, message):
            raise ValueError(f"LM options {list(argv)}: {message}")

    parser = _Parser(prog="lm options", add_help=False)
    add_lm_arguments(parser)
    return parser.parse_args(list(argv))


def fusion_from_args(args: argparse.Namespace, tokenizer) -> Fusion | None:
    """The fusion ``add_lm_arguments``' options ask for: the token LM, the word LM, both (their scores add),
    or None without ``--lm`` and ``--word-lm``. Bad files or values raise ValueError / FileNotFoundError
    with the reason."""
    parts: list[Fusion] = []
    backend = getattr(args, "lm_backend", "auto")
    if args.lm:
        load = load_kenlm_token_lm if use_kenlm(args.lm, backend) else load_token_lm
        parts.append(ShallowFusion(load(args.lm, tokenizer), args.lm_weight, args.length_bonus))
    if getattr(args, "word_lm", None):
        word_lm, words = (load_kenlm_word_lm if use_kenlm(args.word_lm, backend) else load_word_lm)(args.word_lm)
        parts.append(WordFusion(word_lm, words, token_names(tokenizer), args.word_lm_weight, args.word_bonus,
                                args.oov_penalty))
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else FusionSum(tuple(parts))
