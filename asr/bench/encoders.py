"""Our Conformer encoder beside ESPnet's and SpeechBrain's at equal size: one fwd+bwd each.

Equal size: D model dim, H heads, L blocks, FFN width, depthwise kernel, Conv2d 4x
subsampling with D channels in front (ESPnet's ``conv2d`` input layer; SpeechBrain's
encoder takes embedded frames, so it gets the same front end, ours with D channels),
Transformer-XL relative attention in all three (ours ``rel_xl``; ESPnet ``rel_pos`` +
``rel_selfattn`` with ``rel_pos_type=latest``; SpeechBrain ``RelPosMHAXL`` with
``RelPosEncXL``), macaron feed-forward, Swish, no dropout. The parameter counts are
printed beside the times so "equal size" can be checked.

ESPnet and SpeechBrain are benchmark-only extras (``pip install -e '.[bench]'``): a missing
toolkit is reported and skipped. Timing is interleaved: every repeat runs each encoder
once, in a rotating order, and the figure is the median over repeats of this process's
CPU time (and wall time), so load from other processes hits every encoder alike.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from asr.model import build_encoder
from asr.model.masks import padding_mask
from asr.model.subsampling import Conv2dSubsampling


@dataclass(frozen=True)
class EncoderSize:
    input_dim: int = 80
    d_model: int = 256
    heads: int = 4
    layers: int = 12
    ffn_dim: int = 2048
    kernel: int = 15


Run = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (feats (B, T, F), lengths (B,)) -> (B, T', D)


def ours(size: EncoderSize) -> tuple[nn.Module, Run]:
    enc = build_encoder("rel_xl", input_dim=size.input_dim, d_model=size.d_model, num_heads=size.heads,
                        num_layers=size.layers, ffn_dim=size.ffn_dim, conv_kernel=size.kernel, dropout=0.0)
    return enc, lambda feats, lens: enc(feats, lens)[0]


def espnet(size: EncoderSize) -> tuple[nn.Module, Run]:
    from espnet2.asr.encoder.conformer_encoder import ConformerEncoder

    enc = ConformerEncoder(
        input_size=size.input_dim, output_size=size.d_model, attention_heads=size.heads, linear_units=size.ffn_dim,
        num_blocks=size.layers, dropout_rate=0.0, positional_dropout_rate=0.0, attention_dropout_rate=0.0,
        input_layer="conv2d", macaron_style=True, rel_pos_type="latest", pos_enc_layer_type="rel_pos",
        selfattention_layer_type="rel_selfattn", activation_type="swish", use_cnn_module=True,
        cnn_module_kernel=size.kernel, use_flash_attn=False,
    )
    return enc, lambda feats, lens: enc(feats, lens)[0]


class _SpeechBrainWithFrontEnd(nn.Module):
    def __init__(self, size: EncoderSize) -> None:
        super().__init__()
        from speechbrain.lobes.models.transformer.Conformer import ConformerEncoder
        from speechbrain.nnet.attention import RelPosEncXL

        self.front = Conv2dSubsampling(size.input_dim, size.d_model, 4, size.d_model)
        self.pos = RelPosEncXL(size.d_model)
        self.encoder = ConformerEncoder(num_layers=size.layers, d_model=size.d_model, d_ffn=size.ffn_dim,
                                        nhead=size.heads, kernel_size=size.kernel, dropout=0.0,
                                        attention_type="RelPosMHAXL")

    def forward(self, feats: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
        x = self.front(feats)  # (B, T', D)
        pad = ~padding_mask(self.front.output_length(lens), x.size(1))  # (B, T') True on padding
        return self.encoder(x, src_key_padding_mask=pad, pos_embs=self.pos(x))[0]


def speechbrain(size: EncoderSize) -> tuple[nn.Module, Run]:
    enc = _SpeechBrainWithFrontEnd(size)
    return enc, enc


TOOLKITS: dict[str, Callable[[EncoderSize], tuple[nn.Module, Run]]] = {
    "ours": ours, "espnet": espnet, "speechbrain": speechbrain,
}


@dataclass
class Timing:
    name: str
    params: int
    cpu: list[float] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)


def fwd_bwd(run: Run, feats: torch.Tensor, lens: torch.Tensor, params: list[nn.Parameter],
            bf16: bool = False) -> None:
    """One forward and backward; ``bf16``: the forward under CPU bf16 autocast, as Lightning's
    ``bf16-mixed`` runs it (fp32 weights, bf16 matmuls and convolutions)."""
    for p in params:
        p.grad = None
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        out = run(feats, lens)
    out.float().square().mean().backward()


def benchmark(names: list[str], size: EncoderSize, batch: int, frames: int, repeats: int, warmup: int = 2,
              compile_ours: bool = False, bf16: bool = False, log=print) -> list[Timing]:
    g = torch.Generator().manual_seed(0)
    feats = torch.randn(batch, frames, size.input_dim, generator=g)
    lens = torch.full((batch,), frames, dtype=torch.long)
    built = []
    for name in names:
        torch.manual_seed(0)
        try:
            module, run = TOOLKITS[name.removesuffix("+compiled")](size)
        except ImportError as err:
            log(f"{name}: skipped ({err}); pip install -e '.[bench]'")
            continue
        module.train()
        if name.endswith("+compiled"):
            for block in module.blocks:
                block.compile(dynamic=False)
        params = [p for p in module.parameters() if p.requires_grad]
        built.append((Timing(name, sum(p.numel() for p in params)), run, params))
    for _ in range(warmup):  # allocator, kernels, compiles
        for _, run, params in built:
            fwd_bwd(run, feats, lens, params, bf16)
    for rep in range(repeats):
        order = built[rep % len(built):] + built[: rep % len(built)]
        for timing, run, params in order:
            t0, c0 = time.perf_counter(), time.process_time()
            fwd_bwd(run, feats, lens, params, bf16)
            timing.wall.append(time.perf_counter() - t0)
            timing.cpu.append(time.process_time() - c0)
    return [t for t, _, _ in built]


def table(results: list[Timing], reference: str = "ours", width: int = 40) -> str:
    """Rows with median times, ratios to ``reference`` (x > 1: the reference is that much faster)
    and a bar per encoder scaled to the slowest."""
    ref = next((r for r in results if r.name == reference), results[0])
    ref_cpu, ref_wall = statistics.median(ref.cpu), statistics.median(ref.wall)
    slowest = max(statistics.median(r.cpu) for r in results)
    lines = [f"{'encoder':<18}{'params M':>9}{'CPU ms':>9}{'wall ms':>9}{'CPU / ' + ref.name:>14}{'wall / ' + ref.name:>15}"]
    for r in results:
        cpu, wall = statistics.median(r.cpu), statistics.median(r.wall)
        bar = "#" * max(1, round(width * cpu / slowest))
        lines.append(f"{r.name:<18}{r.params / 1e6:>9.2f}{1000 * cpu:>9.0f}{1000 * wall:>9.0f}"
                     f"{cpu / ref_cpu:>14.2f}{wall / ref_wall:>15.2f}  {bar}")
    return "\n".join(lines)
