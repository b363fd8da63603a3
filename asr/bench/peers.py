"""Our model beside Wenet's own ``ASRModel`` and ESPnet's conformer encoder, on the same batches.

Every contender trains (forward + backward, no optimizer: the optimizers are alike and not what
differs) on the same synthetic duration-bucketed batches (``asr.bench.synthetic``), in the same
order, interleaved: for every batch each contender steps once, the order rotating from batch
to batch, so load and clocks hit all of them alike. The first round is warm-up (allocator,
kernels, cuDNN plans) and is not counted.

Contenders at equal size (:class:`PeerSize`: D, H, blocks, FFN width, depthwise kernel, decoder
layers, vocabulary), all with Conv2d 4x subsampling, macaron feed-forward, Swish, no dropout,
and a causal convolution module (ESPnet's has no causal option: centered):

* ``ours``: :class:`~asr.model.asr_model.AsrModel` with ``rel_xl`` (Transformer-XL attention
  with the real ``rel_shift``), CTC + left-to-right + right-to-left decoders;
* ``wenet``: Wenet's ``ASRModel`` built from its source folder (``--wenet-src``, an export of
  its repository; never vendored here): ``ConformerEncoder`` with ``rel_pos`` / ``rel_selfattn``
  (whose position term skips the shift), ``BiTransformerDecoder``, ``CTC``; its loss as its
  trainer computes it;
* ``ours_encoder`` and ``espnet_encoder``: the encoders alone (ESPnet ships its conformer
  encoder as a module; ``rel_pos`` + ``rel_selfattn``, ``rel_pos_type=latest``), the loss the
  mean square of the output.

Full context by default; ``chunk`` > 0 trains ours and Wenet's with that chunk mask (Wenet's
``static_chunk_size``), unlimited left context. Figures per contender: audio seconds per
second (valid frames / 100 over wall time), process CPU time as a share of wall, peak memory
(CUDA: ``max_memory_allocated``), and on CUDA the share of the step the GPU was busy
(``torch.profiler``: summed kernel time over wall time, one extra pass over a few batches).
"""

from __future__ import annotations

import statistics
import sys
import time
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from asr.bench.encoders import EncoderSize, espnet
from asr.bench.synthetic import audio_seconds
from asr.data.batch import Batch
from asr.train.device import synchronize

Step = Callable[[Batch], torch.Tensor]  # batch on the device -> scalar loss


@dataclass(frozen=True)
class PeerSize(EncoderSize):
    """Equal size for every contender: the encoder's (defaults: the LibriSpeech recipe's), Wenet's U2++
    decoders, the vocabulary and the loss weights."""

    decoder_layers: int = 3
    r2l_layers: int = 3
    decoder_ffn_dim: int = 2048
    vocab: int = 5000
    ctc_weight: float = 0.3
    reverse_weight: float = 0.3


@dataclass
class Contender:
    name: str
    module: nn.Module
    step: Step

    @property
    def params(self) -> int:
        return sum(p.numel() for p in self.module.parameters() if p.requires_grad)


def build_ours(size: PeerSize, chunk: int) -> Contender:
    from asr.model.asr_model import build_asr_model

    encoder = {"pos_enc": "rel_xl", "input_dim": size.input_dim, "d_model": size.d_model, "num_heads": size.heads,
               "num_layers": size.layers, "ffn_dim": size.ffn_dim, "conv_kernel": size.kernel, "causal": True,
               "dropout": 0.0}
    model = build_asr_model(vocab_size=size.vocab, sos_eos_id=size.vocab - 1, encoder_kwargs=encoder,
                            decoder_layers=size.decoder_layers, r2l_decoder_layers=size.r2l_layers,
                            decoder_heads=size.heads, decoder_ffn_dim=size.decoder_ffn_dim, decoder_dropout=0.0,
                            ctc_weight=size.ctc_weight, reverse_weight=size.reverse_weight)

    def step(b: Batch) -> torch.Tensor:
        return model(b.feats, b.feat_lens, b.tokens, b.token_lens, chunk_size=chunk)["loss"]

    return Contender("ours", model, step)


def build_ours_encoder(size: PeerSize, chunk: int) -> Contender:
    from asr.model.encoder import build_encoder

    enc = build_encoder("rel_xl", input_dim=size.input_dim, d_model=size.d_model, num_heads=size.heads,
                        num_layers=size.layers, ffn_dim=size.ffn_dim, conv_kernel=size.kernel, causal=True)
    return Contender("ours_encoder", enc,
                     lambda b: enc(b.feats, b.feat_lens, chunk_size=chunk)[0].float().square().mean())


def import_wenet_source(src: Path) -> None:
    """Make ``wenet.models.*`` importable from the source folder ``src`` (holding ``wenet/``), with the three
    shims its import needs here: ``wenet/__init__.py`` skipped (it pulls librosa through its CLI),
    ``whisper.tokenizer.LANGUAGES`` stubbed (``wenet.utils.common`` imports it), and
    ``torch.nn.modules.conv.Union`` restored (one Wenet module imports it from there)."""
    package_dir = Path(src) / "wenet"
    if not (package_dir / "models" / "transformer" / "asr_model.py").is_file():
        raise ImportError(f"no Wenet source at {src} (wanted {package_dir}/models/transformer/asr_model.py)")
    if "wenet" in sys.modules:
        return
    whisper = types.ModuleType("whisper")
    whisper.__path__ = []
    tokenizer = types.ModuleType("whisper.tokenizer")
    tokenizer.LANGUAGES = {}
    sys.modules.setdefault("whisper", whisper)
    sys.modules.setdefault("whisper.tokenizer", tokenizer)
    import torch.nn.modules.conv as conv

    conv.Union = typing.Union
    package = types.ModuleType("wenet")
    package.__path__ = [str(package_dir)]
    sys.modules["wenet"] = package


def build_wenet(size: PeerSize, chunk: int, src: Path | None) -> Contender:
    if src is None:
        raise ImportError("Wenet's source folder was not given (--wenet-src)")
    import_wenet_source(src)
    from wenet.models.transformer.asr_model import ASRModel
    from wenet.models.transformer.ctc import CTC
    from wenet.models.transformer.decoder import BiTransformerDecoder
    from wenet.models.transformer.encoder import ConformerEncoder

    encoder = ConformerEncoder(
        input_size=size.input_dim, output_size=size.d_model, attention_heads=size.heads, linear_units=size.ffn_dim,
        num_blocks=size.layers, dropout_rate=0.0, positional_dropout_rate=0.0, attention_dropout_rate=0.0,
        input_layer="conv2d", pos_enc_layer_type="rel_pos", selfattention_layer_type="rel_selfattn",
        activation_type="swish", macaron_style=True, use_cnn_module=True, cnn_module_kernel=size.kernel,
        causal=True, cnn_module_norm="layer_norm", static_chunk_size=chunk, use_dynamic_chunk=False)
    decoder = BiTransformerDecoder(
        vocab_size=size.vocab, encoder_output_size=size.d_model, attention_heads=size.heads,
        linear_units=size.decoder_ffn_dim, num_blocks=size.decoder_layers, r_num_blocks=size.r2l_layers,
        dropout_rate=0.0, positional_dropout_rate=0.0, self_attention_dropout_rate=0.0,
        src_attention_dropout_rate=0.0)
    model = ASRModel(vocab_size=size.vocab, encoder=encoder, decoder=decoder, ctc=CTC(size.vocab, size.d_model),
                     ctc_weight=size.ctc_weight, reverse_weight=size.reverse_weight, lsm_weight=0.1)

    def step(b: Batch) -> torch.Tensor:
        rows = b.feats.size(0)
        batch = {"feats": b.feats, "feats_lengths": b.feat_lens, "target": b.tokens, "target_lengths": b.token_lens,
                 "langs": [None] * rows, "tasks": [None] * rows}
        return model(batch, b.feats.device)["loss"]

    return Contender("wenet", model, step)


def build_espnet_encoder(size: PeerSize, chunk: int) -> Contender:
    if chunk:
        raise ImportError("ESPnet's conformer encoder has no chunk mask in training; run it with chunk 0")
    enc, run = espnet(size)
    return Contender("espnet_encoder", enc, lambda b: run(b.feats, b.feat_lens).float().square().mean())


CONTENDERS = ("ours", "wenet", "ours_encoder", "espnet_encoder")


def build(name: str, size: PeerSize, chunk: int, wenet_src: Path | None) -> Contender:
    if name not in CONTENDERS:
        raise ValueError(f"unknown contender {name!r}; valid: {', '.join(CONTENDERS)}")
    if name == "wenet":
        return build_wenet(size, chunk, wenet_src)
    return {"ours": build_ours, "ours_encoder": build_ours_encoder, "espnet_encoder": build_espnet_encoder}[name](
        size, chunk)


@dataclass
class PeerStats:
    name: str
    params: int
    audio_s: float = 0.0
    wall: float = 0.0
    cpu: float = 0.0
    peak_bytes: int | None = None
    gpu_busy: float | None = None
    losses: list[float] = field(default_factory=list)

    @property
    def audio_per_second(self) -> float:
        return self.audio_s / self.wall if self.wall else 0.0


def fwd_bwd(contender: Contender, batch: Batch, autocast: torch.dtype | None) -> torch.Tensor:
    for p in contender.module.parameters():
        p.grad = None
    with torch.autocast(batch.feats.device.type, dtype=autocast, enabled=autocast is not None):
        loss = contender.step(batch)
    loss.backward()
    return loss.detach()


def gpu_busy_share(contender: Contender, batches: list[Batch], autocast: torch.dtype | None) -> float:
    """Summed CUDA kernel time over the wall time of ``batches``' steps, under ``torch.profiler``."""
    from torch.profiler import ProfilerActivity, profile

    device = batches[0].feats.device
    synchronize(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        for batch in batches:
            fwd_bwd(contender, batch, autocast)
        synchronize(device)
        wall = time.perf_counter() - t0
    kernel_us = sum(e.device_time_total for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    return kernel_us / 1e6 / wall


def run_peers(names: list[str], size: PeerSize, batches: list[Batch], rounds: int, device: str = "cpu",
              autocast: torch.dtype | None = None, chunk: int = 0, wenet_src: Path | None = None,
              busy_batches: int = 3, log=print) -> list[PeerStats]:
    """Build each contender (a missing one is logged with the reason and skipped), step them interleaved on
    ``batches`` for ``rounds`` rounds after one warm-up round, and return their figures."""
    dev = torch.device(device)
    built: list[tuple[Contender, PeerStats]] = []
    for name in names:
        torch.manual_seed(0)
        try:
            contender = build(name, size, chunk, wenet_src)
        except ImportError as err:
            log(f"{name}: skipped ({err})")
            continue
        contender.module.to(dev).train()
        built.append((contender, PeerStats(name, contender.params)))
    on_device = [b.to(dev) for b in batches]
    for r in range(rounds + 1):
        for i, batch in enumerate(on_device):
            k = (r * len(on_device) + i) % len(built) if built else 0
            for contender, stats in built[k:] + built[:k]:
                if dev.type == "cuda":
                    torch.cuda.reset_peak_memory_stats(dev)
                synchronize(dev)
                t0, c0 = time.perf_counter(), time.process_time()
                loss = fwd_bwd(contender, batch, autocast)
                synchronize(dev)
                if r == 0:
                    continue
                stats.wall += time.perf_counter() - t0
                stats.cpu += time.process_time() - c0
                stats.audio_s += audio_seconds(batch)
                stats.losses.append(float(loss))
                if dev.type == "cuda":
                    peak = torch.cuda.max_memory_allocated(dev)
                    stats.peak_bytes = max(stats.peak_bytes or 0, peak)
    if dev.type == "cuda" and busy_batches > 0:
        for contender, stats in built:
            try:
                stats.gpu_busy = gpu_busy_share(contender, on_device[:busy_batches], autocast)
            except Exception as err:  # noqa: BLE001 - the profiler is a bonus figure: say why it is missing
                log(f"{contender.name}: GPU busy share not measured ({type(err).__name__}: {err})")
    return [stats for _, stats in built]


def peers_table(results: list[PeerStats]) -> str:
    """One row per contender: parameters, audio s per s, ours over it (``ours`` for whole models,
    ``ours_encoder`` for encoders; x > 1: ours is that much faster; - when ours did not run), CPU share
    of wall, peak memory, GPU busy share, median loss."""
    by_name = {r.name: r for r in results}
    lines = [f"{'contender':<16}{'params M':>9}{'audio s/s':>11}{'ours x':>9}{'CPU/wall':>10}"
             f"{'peak GiB':>10}{'GPU busy':>10}{'loss':>9}"]
    for r in results:
        ref = by_name.get("ours_encoder" if r.name.endswith("_encoder") else "ours")
        ratio = f"{ref.audio_per_second / r.audio_per_second:.2f}" if ref and r.audio_per_second else "-"
        peak = f"{r.peak_bytes / 2**30:.2f}" if r.peak_bytes is not None else "-"
        busy = f"{100 * r.gpu_busy:.0f}%" if r.gpu_busy is not None else "-"
        loss = f"{statistics.median(r.losses):.3f}" if r.losses else "-"
        lines.append(f"{r.name:<16}{r.params / 1e6:>9.2f}{r.audio_per_second:>11.1f}{ratio:>9}"
                     f"{100 * r.cpu / r.wall if r.wall else 0:>9.0f}%{peak:>10}{busy:>10}{loss:>9}")
    return "\n".join(lines)
