"""Which attention kernel each position scheme's scorer runs: the one table, and a way to force one.

Routes:

* ``explicit``: the scheme's own path, (B, H, C, K) logits built in PyTorch and the custom softmax
  (or the exact blocked attention of ``asr.model.scorers.blocked`` for long calls). The CPU always
  takes it: no fused kernel there takes these position terms with a backward (FlexAttention has
  no CPU backward; SDPA's CPU kernel with a float bias is the unfused math kernel).
* ``sdpa_bias``: ``F.scaled_dot_product_attention`` with the position term as an additive float bias
  (B|1, H, C, K), masks folded in as -inf. On CUDA the memory-efficient kernel takes the bias and
  returns its gradient; the bias is built once per call by the scheme (rel_xl's shifted BD band,
  rel_bias's expanded table).
* ``flex``: ``torch.nn.attention.flex_attention``, compiled; a ``score_mod`` reads the position
  term from a captured tensor (rel_xl: the shifted BD band; rel_bias: the (H, 2k+1) table itself,
  so nothing of size C x K exists) and a ``BlockMask`` carries padding, chunks and left context,
  built once per mask object (``asr.model.scorers.fused``) and so once per batch for all layers.
  Flex has no attention dropout: a call with dropout active takes ``sdpa_bias`` instead (shaw:
  its explicit path).
* ``joint_sdpa``: both logit terms are one dot product over joint channels, so plain SDPA with a
  bool mask computes the exact logits: no bias, O(C + K) memory. wenet_rel: ``[q + u, q + v] . [k ; P]``
  over 2 Dh channels. rel_xl: ``[q + u, G_i] . [k ; R(j)]`` over Dh + D channels, the sinusoid of
  i - j written as a rotation of the query's projected coefficients by its own time
  (``asr.model.scorers.rel_xl_joint``); under ``blocked.forced()`` on CUDA it replaces rel_xl's
  dense-bias routes.

Shaw's value term ``sum_j p_ij aV[clip(j - i)]`` is no score_mod (it mixes values, not logits):
its ``flex`` route rebuilds each row's probability mass per bucket from the kernel's exact
log-sum-exps (``asr.model.scorers.shaw_flex``).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Optional

import torch

from asr.model.scorers.blocked import is_forced

EXPLICIT = "explicit"
SDPA_BIAS = "sdpa_bias"
FLEX = "flex"
JOINT_SDPA = "joint_sdpa"

# Routes each scheme implements besides ``explicit`` (what forcing may ask for).
FUSED_ROUTES: dict[str, tuple[str, ...]] = {
    "rel_xl": (FLEX, SDPA_BIAS, JOINT_SDPA),
    "wenet_rel": (JOINT_SDPA,),
    "rel_bias": (FLEX, SDPA_BIAS),
    "shaw": (FLEX,),
}

# The route each scheme takes on CUDA, with the reason.
CUDA_ROUTES: dict[str, str] = {
    # The shifted BD band is one (B, H, C, K) tensor either way; flex reads it inside the fused
    # kernel and skips the key blocks the BlockMask rules out (chunks with left context).
    "rel_xl": FLEX,
    # Exact without any bias: the position term is a dot product with per-key vectors.
    "wenet_rel": JOINT_SDPA,
    # The score_mod gathers from the (H, 2k+1) table: no (C, K) bias is ever built or stored.
    "rel_bias": FLEX,
    # The key term is a score_mod over the tiny (B, H, C, 2k+1) q aK^T; the value term costs a
    # second, block-sparse flex call for the far-left mass and a (C, 2k-1) band (shaw_flex).
    "shaw": FLEX,
}

# Routes that build a (C, K) position bias: under ``blocked.forced()`` (the decoding memory guard,
# which budgets for the blocked path's O(C + K) memory) the table's choice yields to the scheme's
# bias-free fused route if it has one, else to ``explicit``.
DENSE_BIAS_ROUTES = {("rel_xl", FLEX), ("rel_xl", SDPA_BIAS), ("rel_bias", SDPA_BIAS)}
BIAS_FREE_ROUTES: dict[str, str] = {"rel_xl": JOINT_SDPA}

ROUTE_NAMES = (SDPA_BIAS, FLEX, JOINT_SDPA)
_FORCED: Optional[str] = None


@contextmanager
def forced_route(route: str) -> Iterator[None]:
    """Inside this block every scorer that implements ``route`` takes it, on any device (tests
    and benchmarks; on the CPU the flex route runs forward only); ``explicit`` forces the
    schemes' own paths on CUDA too. Scorers without ``route`` raise."""
    if route != EXPLICIT and route not in ROUTE_NAMES:
        raise ValueError(f"unknown attention route {route!r}; known: {sorted({EXPLICIT, *ROUTE_NAMES})}.")
    global _FORCED
    before, _FORCED = _FORCED, route
    try:
        yield
    finally:
        _FORCED = before


def route_for(scheme: str, device: torch.device) -> str:
    """The route ``scheme``'s scorer takes for a call on ``device``: the forced one, else
    ``CUDA_ROUTES`` on CUDA (for a dense-bias route under ``blocked.forced()``, the scheme's
    ``BIAS_FREE_ROUTES`` entry or ``explicit``) and ``explicit`` elsewhere."""
    if _FORCED is not None:
        if _FORCED != EXPLICIT and _FORCED not in FUSED_ROUTES[scheme]:
            raise ValueError(f"{scheme} has no {_FORCED!r} attention route; it has "
                             f"{[EXPLICIT, *FUSED_ROUTES[scheme]]}.")
        return _FORCED
    if device.type != "cuda":
        return EXPLICIT
    route = CUDA_ROUTES[scheme]
    if (scheme, route) in DENSE_BIAS_ROUTES and is_forced():
        return BIAS_FREE_ROUTES.get(scheme, EXPLICIT)
    return route
