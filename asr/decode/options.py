"""Decoding options: one typed object for what every recognizer and decoding script shares, one default each,
and the command-line flags that fill it.

:class:`DecodeOptions` holds the encoder's chunking, the CTC prefix beam, the rescoring weights and the hotword
settings; ``asr.streaming.StreamingRecognizer`` (one stream) and ``asr.serve.BatchedStreamRecognizer`` (many
streams, batched) take it, so a setting means the same and defaults the same in both. The language models are
loaded objects (``asr.lm.fusion.Fusion``, built by ``asr.lm.fusion_from_args`` from ``add_lm_arguments``' flags)
and travel beside the options, as do the hotword lists themselves.

The flags: :func:`add_checkpoint_argument`, :func:`add_threads_argument`, :func:`add_chunk_arguments` and
:func:`add_search_arguments` (beam and rescoring weights), beside ``asr.decode.hotwords.add_hotword_arguments``
and ``asr.lm.add_lm_arguments``, define every shared option in one place; :func:`options_from_args` turns
the parsed flags into a :class:`DecodeOptions` and reports a bad value as the flag's error. Scripts call the
ones they need and define none of these flags themselves (tests/scripts/test_shared_options.py checks).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields

import torch

from asr.decode.context_graph import check_unbiased_keep
from asr.decode.hotwords import DEFAULT_HOTWORD_SCORE, DEFAULT_RESCORE_WEIGHT, count_argument
from asr.model.masks import check_chunk_args

# 640 ms chunks (the chunk training validates at, conf/streaming/dynamic_chunk.yaml) with 4 of them
# (2.56 s) of attention memory, which bounds a long stream's memory.
DEFAULT_CHUNK_SIZE = 16
DEFAULT_LEFT_CHUNKS = 4
# Beam 10 is the CTC prefix beam the LM and hotword defaults were tuned at; beam 20 gains little for
# almost three times the search time (data/results/hotwords_lm.md), and a smaller beam loses most of the
# hotwords' gain on rare words. In the server it costs about 1.2x the CPU of beam 4 per stream, 1.35x with a
# 100-phrase list per stream: 32 real-time streams of the quickstart model that each send a list take
# 0.9-1.0 of a core (0.028-0.031 CPU s per audio s each) where beam 4 takes 0.7; --beam 4 serves more.
DEFAULT_BEAM = 10
DEFAULT_CTC_WEIGHT = 0.5
DEFAULT_REVERSE_WEIGHT = 0.0
DEFAULT_THREADS = 0  # 0: torch's own default (a thread per core)


@dataclass(frozen=True)
class DecodeOptions:
    """What a recognizer's encoder chunking, search and rescoring use.

    chunk_size: encoder frames per attention chunk (0: full context, offline decoding only).
    left_chunks: chunks of attention memory (-1: all, unbounded memory on long streams).
    beam: CTC prefix beam width, also the n-best size for rescoring (>= 1).
    ctc_weight: weight of the CTC score added to the attention score in rescoring (>= 0).
    reverse_weight: share of the right-to-left decoder in the attention score, in [0, 1] (> 0 needs a U2++
        model; ``asr.decode.rescoring``).
    hotword_score: bonus per matched token of a phrase without its own score (``asr.decode.hotwords``).
    hotword_rescore_weight: share of the kept hotword bonus rescoring adds to its sentence scores (>= 0).
    hotword_unbiased_keep: prefixes a biased search keeps on their unbiased score (None: the search's default).
    """

    chunk_size: int = DEFAULT_CHUNK_SIZE
    left_chunks: int = DEFAULT_LEFT_CHUNKS
    beam: int = DEFAULT_BEAM
    ctc_weight: float = DEFAULT_CTC_WEIGHT
    reverse_weight: float = DEFAULT_REVERSE_WEIGHT
    hotword_score: float = DEFAULT_HOTWORD_SCORE
    hotword_rescore_weight: float = DEFAULT_RESCORE_WEIGHT
    hotword_unbiased_keep: int | None = None

    def __post_init__(self) -> None:
        check_chunk_args(self.chunk_size, self.left_chunks)
        if self.beam < 1:
            raise ValueError(f"beam ({self.beam}) must be >= 1.")
        if self.ctc_weight < 0.0:
            raise ValueError(f"ctc_weight ({self.ctc_weight}) must be >= 0.")
        if not 0.0 <= self.reverse_weight <= 1.0:
            raise ValueError(f"reverse_weight ({self.reverse_weight}) must be in [0, 1].")
        if self.hotword_rescore_weight < 0.0:
            raise ValueError(f"hotword_rescore_weight ({self.hotword_rescore_weight}) must be >= 0.")
        check_unbiased_keep(self.hotword_unbiased_keep, "hotword_unbiased_keep")

    def check_streaming(self, model) -> None:
        """ValueError unless these options can stream ``model``: a chunk, and a right-to-left decoder when
        reverse_weight asks for one (refused here, not after a whole utterance has been streamed)."""
        if self.chunk_size <= 0:
            raise ValueError(f"chunk_size ({self.chunk_size}) must be > 0 for streaming.")
        if self.reverse_weight > 0.0 and getattr(model, "r2l_decoder", None) is None:
            raise ValueError(f"reverse_weight ({self.reverse_weight}) > 0 needs a model with a right-to-left decoder.")


def add_checkpoint_argument(parser: argparse.ArgumentParser, many: bool = False) -> None:
    """``--checkpoint CKPT`` (``--ckpt`` is an old alias): the model to load, required. ``many``: one or more
    checkpoints instead, ``args.checkpoints`` (``--ckpts`` is the old alias), optional (averaging takes a run
    folder's best ones without it)."""
    if many:
        parser.add_argument("--checkpoint", "--ckpts", dest="checkpoints", action="extend", nargs="+",
                            metavar="CKPT", help="checkpoints to take instead of a run folder's best ones")
        return
    parser.add_argument("--checkpoint", "--ckpt", dest="checkpoint", required=True, metavar="CKPT",
                        help="checkpoint written by scripts/train.py (or averaged, or imported from Wenet)")


def add_threads_argument(parser: argparse.ArgumentParser, default: int = DEFAULT_THREADS) -> None:
    """``--threads N``: torch's intra-op threads (0: torch's default). A script passes its own ``default`` only
    where it measures (steady timings need a fixed count) or serves (small per-chunk kernels: one thread)."""
    what = "torch's default" if default == 0 else str(default)
    parser.add_argument("--threads", type=count_argument, default=default, metavar="N",
                        help=f"torch (and ONNX Runtime) intra-op threads; 0: torch's default (default: {what})")


def set_threads(threads: int) -> None:
    """Apply ``--threads``: torch's intra-op thread count, left alone at 0."""
    if threads > 0:
        torch.set_num_threads(threads)


def add_chunk_arguments(parser: argparse.ArgumentParser, full_context: bool = False) -> None:
    """``--chunk-size C`` and ``--left-chunks L``. ``full_context``: the defaults are 0 and -1 (the whole
    utterance at once), for offline decoding, which evaluates a model as trained before it streams."""
    chunk, left = (0, -1) if full_context else (DEFAULT_CHUNK_SIZE, DEFAULT_LEFT_CHUNKS)
    parser.add_argument("--chunk-size", type=int, default=chunk, metavar="C",
                        help=f"encoder frames per attention chunk; 0: full context, which cannot stream "
                             f"(default {chunk})")
    parser.add_argument("--left-chunks", type=int, default=left, metavar="L",
                        help=f"chunks of attention memory; -1: all (default {left})")


def add_search_arguments(parser: argparse.ArgumentParser, rescoring: bool = True) -> None:
    """``--beam`` and, with ``rescoring``, ``--ctc-weight`` and ``--reverse-weight`` (a script whose evaluation
    rescores at the default weights takes the beam alone)."""
    parser.add_argument("--beam", type=int, default=DEFAULT_BEAM,
                        help=f"CTC prefix beam width and n-best size for rescoring (default {DEFAULT_BEAM})")
    if not rescoring:
        return
    parser.add_argument("--ctc-weight", type=float, default=DEFAULT_CTC_WEIGHT,
                        help=f"CTC score weight in attention rescoring (default {DEFAULT_CTC_WEIGHT})")
    parser.add_argument("--reverse-weight", type=float, default=DEFAULT_REVERSE_WEIGHT,
                        help=f"right-to-left decoder weight in rescoring; needs a U2++ model "
                             f"(default {DEFAULT_REVERSE_WEIGHT})")


def options_from_args(args: argparse.Namespace, parser: argparse.ArgumentParser | None = None) -> DecodeOptions:
    """The :class:`DecodeOptions` the parsed flags ask for; options a script does not take keep their defaults.

    A bad value is ``parser.error`` (usage and a one-line message, exit 2) when ``parser`` is given, else the
    ValueError naming it.
    """
    given = {f.name: getattr(args, f.name) for f in fields(DecodeOptions) if hasattr(args, f.name)}
    try:
        return DecodeOptions(**given)
    except ValueError as err:
        if parser is None:
            raise
        parser.error(str(err))
