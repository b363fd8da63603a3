"""Shallow fusion: a language model's score added to a decoder's, token by token.

Every place that ranks hypotheses (the CTC prefix beam, attention rescoring)
adds, for a hypothesis y of |y| tokens,

    weight * log P_lm(y, </s>) + length_bonus * |y|

where the end-of-sentence term counts only once the hypothesis is complete. The
length bonus pays back the LM's pull towards short outputs (each token costs a
log-probability below zero), which would otherwise turn into deletions.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from asr.lm.ngram import NgramLM


class Fusion(Protocol):
    """What the searches need from a language model: scores added to a hypothesis' log-probability.

    For any complete hypothesis, ``sentence_score(tokens)`` equals the sum of ``token_score`` over its
    tokens plus ``end_score(tokens)``, so a beam that adds them token by token and a rescorer that
    scores whole sentences rank the same way.
    """

    def token_score(self, history: Sequence[int], token: int) -> float: ...

    def end_score(self, tokens: Sequence[int]) -> float: ...

    def sentence_score(self, tokens: Sequence[int]) -> float: ...

    def settings(self) -> dict: ...

    def with_words(self, words: Iterable[str]) -> Fusion:
        """The same models with ``words`` (hotwords) added to the lexicon, if there is one."""
        ...


@dataclass(frozen=True)
class ShallowFusion:
    """A language model and how much it counts.

    Args:
        lm: the token n-gram model (its ids are the ASR model's): ``NgramLM`` or ``KenLMNgram``.
        weight: scale of the LM log-probability (>= 0; 0 turns the LM off).
        length_bonus: added per token (any finite value).
    """

    lm: NgramLM  # or asr.lm.kenlm_backend.KenLMNgram: the same scoring interface
    weight: float
    length_bonus: float = 0.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.weight) and self.weight >= 0):
            raise ValueError(f"weight ({self.weight}) must be a finite number >= 0.")
        if not math.isfinite(self.length_bonus):
            raise ValueError(f"length_bonus ({self.length_bonus}) must be finite.")

    def token_score(self, history: Sequence[int], token: int) -> float:
        """What appending ``token`` after ``history`` adds to a hypothesis' score."""
        return self.weight * self.lm.logprob(history, token) + self.length_bonus

    def end_score(self, tokens: Sequence[int]) -> float:
        """What ending the sentence after ``tokens`` adds."""
        return self.weight * self.lm.logprob(tokens, self.lm.eos_id)

    def sentence_score(self, tokens: Sequence[int]) -> float:
        """The whole contribution for a complete hypothesis: the sum of its token scores and its end score."""
        return self.weight * self.lm.sentence_logprob(tokens) + self.length_bonus * len(tokens)

    def settings(self) -> dict:
        return {"order": self.lm.order, "weight": self.weight, "length_bonus": self.length_bonus}

    def with_words(self, words: Iterable[str]) -> ShallowFusion:
        return self  # no lexicon: a token LM spells anything


@dataclass(frozen=True)
class FusionSum:
    """Several language models at once (e.g. the token LM and a word LM with its lexicon): scores add."""

    parts: tuple[Fusion, ...]

    def __post_init__(self) -> None:
        if not self.parts:
            raise ValueError("FusionSum needs at least one language model")

    def token_score(self, history: Sequence[int], token: int) -> float:
        return sum(part.token_score(history, token) for part in self.parts)

    def end_score(self, tokens: Sequence[int]) -> float:
        return sum(part.end_score(tokens) for part in self.parts)

    def sentence_score(self, tokens: Sequence[int]) -> float:
        return sum(part.sentence_score(tokens) for part in self.parts)

    def settings(self) -> dict:
        merged: dict = {}
        for part in self.parts:
            merged.update(part.settings())
        return merged

    def with_words(self, words: Iterable[str]) -> FusionSum:
        words = frozenset(words)
        return FusionSum(tuple(part.with_words(words) for part in self.parts))
