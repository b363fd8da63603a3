"""The compiled training step: ``torch.compile`` (inductor) behind one switch, ``compile.enabled``.

Scope (``compile.scope``):

* ``blocks`` (regional compilation): each encoder block and each decoder layer is compiled in
  place. The blocks of a stack share their code, so one graph serves every layer (the
  parameters are graph inputs): compile time is that of one block, not of the model, which
  matters on a 2-core CPU where inductor takes minutes. The blocks take only tensors, so the
  per-batch chunk draw (ints) never reaches a graph: below the blocked attention's size the
  encoder hands them the dense (B, 1, T') full-context or (B, T', T') chunk mask, not its
  ``ChunkMask``, whose ints dynamo's guards would specialize on (the blocks compile 11 graphs over
  a quickstart epoch, none in a second one; data/results/speed.md). Graphs still differ by
  mask layout, rel_xl's query-block case (T' within or beyond 64) and a batch below or above
  16 rows (a guard of PyTorch's conv1d).
* ``model``: the whole ``AsrModel.forward`` (encoder, CTC, decoders, losses) is one graph;
  the chunk ints then become part of its guards (full context, bounded and unbounded left
  context each compile separately).

``dynamic=true`` marks every batch dimension dynamic from the first batch, so a new (B, T)
never recompiles; a compile happens only for a new kind of input (mask layout, a size of 1,
rel_xl's block case). That holds under inductor only with its layout optimization off
(``layout_optimization``, off by default): on a CPU with oneDNN, inductor turns channels-last
layouts on for any graph with a convolution before it checks for symbolic shapes (its CUDA path
checks first; torch 2.11, ``GraphLowering.decide_layout_opt``), and AOT autograd then re-strides
the backward's saved activations with the forward's concrete strides. With it on, a conformer
block's backward specializes on the frame count T' (a graph per T' up to ``recompile_limit``), and
for ``abs_sin``, ``rope`` and ``none`` the graph of the second length is reused at the third and
fails inductor's stride check (AssertionError).
``asr.model.tracing`` lists what the model does differently while it is traced (plain ops for its
in-place autograd Functions, no host reads); the traced model computes the same numbers
(``tests/model/test_compiled.py``).

Nothing here changes the module tree: ``nn.Module.compile`` wraps ``__call__`` in place, so
state dicts, checkpoints and ``load_model`` are those of the eager model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch._inductor.config
from torch import nn

SCOPES = ("blocks", "model")


@dataclass(frozen=True)
class CompileConfig:
    """``compile``: see the module docstring. ``mode``: inductor's mode (``default``,
    ``reduce-overhead``, ``max-autotune``, ...). ``recompile_limit``: graphs a compiled region may
    collect before dynamo falls back to eager for it (its default, 8, is below rel_xl's cases
    times the mask layouts in ``model`` scope). ``layout_optimization``: inductor's channels-last
    layout choice, process-wide; only with ``dynamic=false`` (see the module docstring)."""

    enabled: bool = False
    scope: str = "blocks"
    dynamic: bool = True
    mode: str = "default"
    backend: str = "inductor"
    recompile_limit: int = 32
    layout_optimization: bool = False

    def __post_init__(self) -> None:
        if self.scope not in SCOPES:
            raise ValueError(f"compile.scope ({self.scope!r}) must be one of {', '.join(SCOPES)}.")
        if self.recompile_limit < 1:
            raise ValueError(f"compile.recompile_limit ({self.recompile_limit}) must be >= 1.")
        if self.layout_optimization and self.dynamic:
            raise ValueError(
                "compile.layout_optimization=true needs compile.dynamic=false: with dynamic shapes inductor's "
                "layout optimization specializes each block's backward on the frame count (and for abs_sin, "
                "rope and none fails its stride check at the third length)."
            )


def compiled_regions(model: nn.Module, scope: str) -> list[nn.Module]:
    """The modules ``compile_model`` compiles: the encoder blocks and decoder layers, or the model."""
    if scope == "model":
        return [model]
    regions = list(model.encoder.blocks)
    for decoder in (getattr(model, "decoder", None), getattr(model, "r2l_decoder", None)):
        if decoder is not None:
            regions += list(decoder.layers)
    return regions


def compile_model(model: nn.Module, config: CompileConfig) -> list[nn.Module]:
    """Compile ``model``'s regions in place (nothing when ``config.enabled`` is false); returns them."""
    if not config.enabled:
        return []
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, config.recompile_limit)
    # Process-wide, read when a graph is lowered (the first call of each region), not when compiled.
    torch._inductor.config.layout_optimization = config.layout_optimization
    regions = compiled_regions(model, config.scope)
    # "default" is spelled as no mode: torch.compile refuses a mode together with options.
    mode = None if config.mode == "default" else config.mode
    for region in regions:
        region.compile(backend=config.backend, dynamic=config.dynamic, mode=mode)
    return regions


def compiled_graph_count() -> int:
    """Graphs dynamo has compiled in this process so far (every region, first compiles and recompiles)."""
    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])
