"""Position schemes: one encoder-level object per scheme, one shared interface.

Axis legend: B batch, T' encoder frames, D model dim, H heads, Dh head dim,
C query chunk, M cached frames, K = M + C keys (queries are the last C keys).

A scheme has two halves:

* ``embed_input(x, start_time)`` runs once per encoder call on the subsampled
  input. Absolute schemes add their table at absolute stream time here; the
  relative ones return ``x`` unchanged.
* ``make_scorer(...)`` builds one :class:`~asr.model.scorers.AttentionScorer` per
  layer (with that layer's own learned positional parameters). The scorer turns
  per-head q, k, v into the attention output, so the relative schemes put their
  position terms exactly where their papers do (logits and, for Shaw, values).

``pos_enc`` is a single choice: the scheme decides both halves, so there is no
pair of strings that must agree.
"""

from __future__ import annotations

import inspect

from torch import Tensor, nn

from asr.model.scorers import (
    AttentionScorer,
    PlainScorer,
    RelBiasScorer,
    RelXLScorer,
    RopeScorer,
    ShawScorer,
    WenetRelScorer,
)
from asr.model.scorers.base import check_max_distance, per_head_dim
from asr.model.scorers.rope import check_rope_args
from asr.model.sinusoid import absolute_sinusoids

POSITION_SCHEMES = ("rel_xl", "wenet_rel", "shaw", "abs_sin", "abs_learned", "rel_bias", "rope", "none")


class PositionScheme(nn.Module):
    """Encoder-level half of a position scheme.

    Args:
        d_model: model dimension D.
        num_heads: attention heads H (D must be a multiple of H).
    """

    name: str = ""
    # Translation invariant schemes: the same window gives the same output at any
    # absolute stream time once the left context is bounded.
    is_relative: bool = False

    def __init__(self, d_model: int, num_heads: int) -> None:
        super().__init__()
        per_head_dim(d_model, num_heads)
        self.d_model = d_model
        self.num_heads = num_heads

    def embed_input(self, x: Tensor, start_time: int) -> Tensor:
        """Add absolute positions (if any) to the subsampled input.

        Args:
            x: (B, T', D) encoder-frame features; row t sits at absolute time start_time + t.
            start_time: absolute stream time of the first row (0 offline).
        Returns:
            (B, T', D), ``x`` itself for schemes without an input term.
        """
        if start_time < 0:
            raise ValueError(f"start_time ({start_time}) must be >= 0.")
        return x

    def make_scorer(self, num_heads: int, head_dim: int, dropout: float) -> AttentionScorer:
        """A fresh scorer (own parameters) for one attention layer."""
        return PlainScorer(num_heads, head_dim, dropout)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, num_heads={self.num_heads}"


class NoPositions(PositionScheme):
    """No position information at all (the ablation's floor)."""

    name = "none"


class SinusoidalPositions(PositionScheme):
    """Transformer sinusoid added at absolute encoder-frame time (Vaswani et al. 2017)."""

    name = "abs_sin"

    def embed_input(self, x: Tensor, start_time: int) -> Tensor:
        super().embed_input(x, start_time)
        return x + absolute_sinusoids(start_time, x.size(1), x.size(-1), x)  # (T', D) table


class TooLongForTable(ValueError):
    """An input longer than a scheme's position table: the scheme cannot run it (not a bug)."""


class LearnedPositions(PositionScheme):
    """Trainable absolute table (BERT style) with a hard length limit ``max_len``."""

    name = "abs_learned"

    def __init__(self, d_model: int, num_heads: int, max_len: int = 5000) -> None:
        super().__init__(d_model, num_heads)
        if max_len <= 0:
            raise ValueError(f"abs_learned max_len ({max_len}) must be > 0.")
        self.max_len = max_len
        self.table = nn.Embedding(max_len, d_model)
        nn.init.normal_(self.table.weight, std=0.02)

    def embed_input(self, x: Tensor, start_time: int) -> Tensor:
        super().embed_input(x, start_time)
        end = start_time + x.size(1)
        if end > self.max_len:
            raise TooLongForTable(
                f"abs_learned has max_len={self.max_len} positions but encoder frames up to "
                f"time {end - 1} were requested (start_time={start_time}, T'={x.size(1)}); "
                f"raise pos_enc.max_len or use a relative scheme."
            )
        return x + self.table.weight[start_time:end]

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, max_len={self.max_len}"


class TransformerXLPositions(PositionScheme):
    """Transformer-XL relative attention (Dai et al. 2019): learned u, v and a
    projected sinusoid over signed distance, per layer."""

    name = "rel_xl"
    is_relative = True

    def make_scorer(self, num_heads: int, head_dim: int, dropout: float) -> AttentionScorer:
        return RelXLScorer(num_heads, head_dim, dropout)


class WenetRelPositions(PositionScheme):
    """Wenet's ``rel_pos`` attention as Wenet ships it: learned u, v and a projected sinusoid
    of each KEY's absolute stream time, no rel_shift (``asr.model.scorers.wenet_rel``).

    Not translation invariant: its position term reads absolute key times, so the
    scorer is given the stream clock (``absolute_keys``)."""

    name = "wenet_rel"

    def make_scorer(self, num_heads: int, head_dim: int, dropout: float) -> AttentionScorer:
        return WenetRelScorer(num_heads, head_dim, dropout)


class _ClippedDistancePositions(PositionScheme):
    """Schemes with learned per-layer tables over clip(j - i, -k, k), k = max_distance."""

    is_relative = True
    scorer_class: type[AttentionScorer]

    def __init__(self, d_model: int, num_heads: int, max_distance: int = 16) -> None:
        super().__init__(d_model, num_heads)
        check_max_distance(self.name, max_distance)
        self.max_distance = max_distance

    def make_scorer(self, num_heads: int, head_dim: int, dropout: float) -> AttentionScorer:
        return self.scorer_class(num_heads, head_dim, dropout, self.max_distance)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, max_distance={self.max_distance}"


class ShawPositions(_ClippedDistancePositions):
    """Shaw et al. (2018): learned key and value tables over clipped distance j - i."""

    name = "shaw"
    scorer_class = ShawScorer


class RelativeBiasPositions(_ClippedDistancePositions):
    """T5/Swin style learned scalar logit bias per head and clipped distance j - i."""

    name = "rel_bias"
    scorer_class = RelBiasScorer


class RotaryPositions(PositionScheme):
    """Rotary embedding (Su et al. 2021) on q and k, positions local to each call."""

    name = "rope"
    is_relative = True

    def __init__(self, d_model: int, num_heads: int, base: float = 10000.0) -> None:
        super().__init__(d_model, num_heads)
        check_rope_args(d_model // num_heads, base)
        self.base = float(base)

    def make_scorer(self, num_heads: int, head_dim: int, dropout: float) -> AttentionScorer:
        return RopeScorer(num_heads, head_dim, dropout, self.base)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, base={self.base}"


_SCHEME_CLASSES: dict[str, type[PositionScheme]] = {
    cls.name: cls
    for cls in (
        TransformerXLPositions,
        WenetRelPositions,
        ShawPositions,
        SinusoidalPositions,
        LearnedPositions,
        RelativeBiasPositions,
        RotaryPositions,
        NoPositions,
    )
}
assert tuple(_SCHEME_CLASSES) == POSITION_SCHEMES


def scheme_options(name: str) -> tuple[str, ...]:
    """Option names ``build_position_scheme`` accepts for scheme ``name``.

    Lets callers (the encoder builder, configs) split scheme options from their own.
    """
    cls = _scheme_class(name)
    params = list(inspect.signature(cls.__init__).parameters)
    return tuple(p for p in params if p not in ("self", "d_model", "num_heads"))


def build_position_scheme(name: str, d_model: int, num_heads: int, **options) -> PositionScheme:
    """Build the position scheme called ``name``; the one place the choice is validated.

    Args:
        name: one of :data:`POSITION_SCHEMES`.
        d_model: model dimension D.
        num_heads: attention heads H.
        **options: scheme options: ``max_distance`` (shaw, rel_bias), ``max_len``
            (abs_learned), ``base`` (rope).
    Raises:
        ValueError: unknown name (lists the valid ones) or an option the scheme does not take.
    """
    cls = _scheme_class(name)
    allowed = scheme_options(name)
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(
            f"position scheme {name!r} does not take option(s) {unknown}; "
            f"it accepts {list(allowed) if allowed else 'no options'}."
        )
    return cls(d_model, num_heads, **options)


def _scheme_class(name: str) -> type[PositionScheme]:
    if name not in _SCHEME_CLASSES:
        raise ValueError(f"unknown position scheme {name!r}; valid: {', '.join(POSITION_SCHEMES)}.")
    return _SCHEME_CLASSES[name]


__all__ = [
    "POSITION_SCHEMES",
    "AttentionScorer",
    "PositionScheme",
    "build_position_scheme",
    "scheme_options",
]
