"""Attention scorers: the per-layer half of each position scheme (see asr.model.positions)."""

from asr.model.scorers.base import AttentionScorer, PlainScorer
from asr.model.scorers.rel_bias import RelBiasScorer
from asr.model.scorers.rel_xl import RelXLScorer, rel_shift, rel_shift_gather
from asr.model.scorers.rope import RopeScorer
from asr.model.scorers.shaw import ShawScorer
from asr.model.scorers.wenet_rel import WenetRelScorer

__all__ = [
    "AttentionScorer",
    "PlainScorer",
    "RelBiasScorer",
    "RelXLScorer",
    "RopeScorer",
    "ShawScorer",
    "WenetRelScorer",
    "rel_shift",
    "rel_shift_gather",
]
