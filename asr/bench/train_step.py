"""Where a training step's time goes, and eager against compiled steps on the same batches.

Both measurements build the run exactly as ``train(cfg)`` does (``asr.train.run.build_module``
on the composed Hydra config, the data module's training loader) and run the step Lightning
runs: forward, backward, gradient clipping (the trainer's ``gradient_clip_val``), AdamW, LR
schedule. Times are wall (``perf_counter``) and this process's CPU time (``process_time``,
all its threads); on a shared machine CPU time is the steadier of the two.

* :func:`profile_steps`: one model, real batches from the loader; per step the wall time
  spent waiting for the batch, in the encoder, the decoders, the losses (what is left of
  the forward: CTC head, CTC and label-smoothed losses), the backward through the decoders
  and losses, the backward through the encoder, and the optimizer (clip + step + zero_grad).
  Module hooks mark the boundaries; a tensor hook on the encoder output marks where the
  backward enters the encoder.
* :func:`compare_steps`: several variants of one initial model (eager, compiled by blocks,
  compiled whole) step on the same batches in turn (interleaved: load changes hit all of
  them alike); reports compile time, graphs compiled, per-step time after warm-up, and the
  training loss of each variant along the way (the curves must agree).
* :func:`recompile_census`: the batch shapes of a whole epoch of the training sampler (no
  audio read) and the step's chunk draws, through a narrow copy of the recipe's model
  compiled with a graph-counting backend: when each graph was compiled. Guards depend on
  shapes and mask layouts, not on widths, so the count is the full model's, in seconds.
"""

from __future__ import annotations

import copy
import itertools
import statistics
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from asr.bench.synthetic import synthetic_batches  # noqa: F401  (the benchmarks' batches)
from asr.train.compile import CompileConfig, compile_model, compiled_graph_count
from asr.train.device import synchronize
from asr.train.optim import guard_fused
from asr.train.run import build_module, run_features
from asr.train.schedule import build_scheduler

PHASES = ("data", "encoder", "decoder", "loss", "backward_decoder_loss", "backward_encoder", "optimizer")


def build_training(cfg: DictConfig):
    """(data module, LightningModule, optimizer, scheduler) as ``train(cfg)`` builds them."""
    # The run's fbank options, as train() passes them: without them the data module extracts LEGACY
    # fbank (and a feature store built for the recipe's options would be rebuilt for those).
    datamodule = instantiate(cfg.data, world_size=1, rank=0, features=run_features(cfg).to_dict())
    datamodule.prepare_data()
    datamodule.setup("fit")
    module = build_module(cfg, datamodule.tokenizer, datamodule.cmvn_path)
    optimizer, scheduler = make_optimizer(cfg, module.model)
    return datamodule, module, optimizer, scheduler


@dataclass(frozen=True)
class SyntheticTokenizer:
    """Vocabulary facts of a tokenizer, for a model built without a corpus."""

    vocab_size: int
    blank_id: int = 0

    @property
    def sos_eos_id(self) -> int:
        return self.vocab_size - 1


def build_synthetic(cfg: DictConfig, vocab_size: int):
    """(LightningModule, optimizer, scheduler) of the recipe's model without its corpus (identity
    CMVN, a ``vocab_size`` vocabulary): throughput of a recipe whose data is not on this machine."""
    from asr.model.asr_model import build_asr_model
    from asr.train.checkpoint import model_kwargs_from_config
    from asr.train.config import StreamingConfig, from_group
    from asr.train.module import AsrLightningModule

    kwargs = model_kwargs_from_config(OmegaConf.to_container(cfg.model, resolve=True),
                                      OmegaConf.to_container(cfg.pos_enc, resolve=True), SyntheticTokenizer(vocab_size))
    module = AsrLightningModule(model=build_asr_model(**kwargs), optimizer=instantiate(cfg.optim.optimizer),
                                tokenizer=None, streaming=from_group(StreamingConfig, cfg.streaming), seed=cfg.seed)
    optimizer, scheduler = make_optimizer(cfg, module.model)
    return module, optimizer, scheduler


def make_optimizer(cfg: DictConfig, model: torch.nn.Module):
    optimizer = guard_fused(instantiate(cfg.optim.optimizer)(params=model.parameters()))
    sched = dict(cfg.optim.scheduler)
    if sched.get("total_steps") is None:  # the trainer's step budget; a recipe bounded by epochs: a long one
        sched["total_steps"] = int(cfg.trainer.max_steps) if cfg.trainer.max_steps > 0 else 1_000_000
    return optimizer, build_scheduler(optimizer, **sched)


def time_optimizers(model: torch.nn.Module, repeats: int = 50) -> str:
    """A table of AdamW's step time for ``model``'s parameters: for-loop, foreach and fused
    (process CPU time over ``repeats`` steps, random gradients; the fused layout guard included).
    Overwrites the parameters' gradients and moves the parameters."""
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.grad = torch.randn_like(p)
    lines = [f"{len(params)} tensors, {sum(p.numel() for p in params) / 1e6:.2f} M parameters",
             f"{'AdamW':<10}{'ms/step':>10}"]
    for name, kwargs in (("for-loop", {"foreach": False}), ("foreach", {"foreach": True}), ("fused", {"fused": True})):
        optimizer = guard_fused(torch.optim.AdamW(params, lr=1e-4, **kwargs))  # the layout guard timed too
        optimizer.step()  # state allocated outside the timing
        start = time.process_time()
        for _ in range(repeats):
            optimizer.step()
        lines.append(f"{name:<10}{1000 * (time.process_time() - start) / repeats:>10.2f}")
    return "\n".join(lines)


class _Marks:
    """perf_counter marks set by module and tensor hooks during one step."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.t: dict[str, float] = {}
        self.decoder_seconds = 0.0
        self.handles = []
        encoder = model.encoder

        def enc_pre(module, args):
            self.t["enc_start"] = time.perf_counter()

        def enc_post(module, args, output):
            self.t["enc_end"] = time.perf_counter()
            out = output[0]
            if out.requires_grad:
                out.register_hook(self._backward_reaches_encoder)

        self.handles += [encoder.register_forward_pre_hook(enc_pre), encoder.register_forward_hook(enc_post)]
        for decoder in (getattr(model, "decoder", None), getattr(model, "r2l_decoder", None)):
            if decoder is not None:
                self.handles += [decoder.register_forward_pre_hook(self._dec_pre),
                                 decoder.register_forward_hook(self._dec_post)]

    def _dec_pre(self, module, args):
        self.t["dec_start"] = time.perf_counter()

    def _dec_post(self, module, args, output):
        self.decoder_seconds += time.perf_counter() - self.t["dec_start"]

    def _backward_reaches_encoder(self, grad):
        self.t["bwd_encoder"] = time.perf_counter()

    def reset(self) -> None:
        self.t.clear()
        self.decoder_seconds = 0.0

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def train_step(module, optimizer, scheduler, batch, clip: float | None,
               autocast: torch.dtype | None = None) -> torch.Tensor:
    """Forward with a chunk draw (under autocast to ``autocast`` when given: Lightning's
    bf16-mixed), backward, clipping, optimizer and LR step: Lightning's step."""
    chunk_size, left_chunks = module.chunks.sample()
    batch = batch.to(module.model.ctc_proj.weight.device)
    with torch.autocast(batch.feats.device.type, dtype=autocast, enabled=autocast is not None):
        loss = module.model(batch.feats, batch.feat_lens, batch.tokens, batch.token_lens,
                            chunk_size=chunk_size, left_chunks=left_chunks)["loss"]
    loss.backward()
    if clip:
        torch.nn.utils.clip_grad_norm_(module.model.parameters(), clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    scheduler.step()
    return loss.detach()


@dataclass
class Profile:
    """Seconds per phase, summed over the measured steps, and their count."""

    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    steps: int = 0
    wall: float = 0.0
    cpu: float = 0.0

    def table(self) -> str:
        lines = [f"{'phase':<24}{'ms/step':>10}{'share':>8}"]
        for phase in PHASES:
            ms = 1000 * self.seconds[phase] / max(self.steps, 1)
            lines.append(f"{phase:<24}{ms:>10.1f}{100 * self.seconds[phase] / self.wall:>7.1f}%")
        other = self.wall - sum(self.seconds.values())
        lines.append(f"{'other':<24}{1000 * other / max(self.steps, 1):>10.1f}{100 * other / self.wall:>7.1f}%")
        lines.append(f"{'step (wall)':<24}{1000 * self.wall / max(self.steps, 1):>10.1f}{100.0:>7.1f}%")
        lines.append(f"{'step (process CPU)':<24}{1000 * self.cpu / max(self.steps, 1):>10.1f}")
        return "\n".join(lines)


def profile_steps(module, optimizer, scheduler, loader: Iterable, steps: int, warmup: int = 5,
                  clip: float | None = 5.0) -> Profile:
    """Time ``steps`` training steps (after ``warmup``) phase by phase; see the module docstring."""
    model = module.model.train()
    marks = _Marks(model)
    prof = Profile()
    batches = iter(loader)
    try:
        for i in range(warmup + steps):
            marks.reset()
            t0, c0 = time.perf_counter(), time.process_time()
            batch = next(batches)
            t_data = time.perf_counter()
            chunk_size, left_chunks = module.chunks.sample()
            out = model(batch.feats, batch.feat_lens, batch.tokens, batch.token_lens,
                        chunk_size=chunk_size, left_chunks=left_chunks)
            t_fwd = time.perf_counter()
            out["loss"].backward()
            t_bwd = time.perf_counter()
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip) if clip else None
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            scheduler.step()
            t_end, c_end = time.perf_counter(), time.process_time()
            if i < warmup:
                continue
            enc = marks.t["enc_end"] - marks.t["enc_start"]
            reach = marks.t.get("bwd_encoder", t_fwd)
            for phase, seconds in (
                ("data", t_data - t0), ("encoder", enc), ("decoder", marks.decoder_seconds),
                ("loss", (t_fwd - t_data) - enc - marks.decoder_seconds),
                ("backward_decoder_loss", reach - t_fwd), ("backward_encoder", t_bwd - reach),
                ("optimizer", t_end - t_bwd),
            ):
                prof.seconds[phase] += seconds
            prof.steps += 1
            prof.wall += t_end - t0
            prof.cpu += c_end - c0
    finally:
        marks.remove()
    return prof


@dataclass
class VariantStats:
    name: str
    first_steps_seconds: float = 0.0  # wall of the warm-up steps: compiles happen there
    graphs: int = 0
    late_graphs: int = 0  # graphs compiled after the warm-up (recompiles while measuring)
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)

    def row(self, reference: VariantStats | None) -> str:
        wall, cpu = statistics.median(self.wall), statistics.median(self.cpu)
        ratio = "" if reference is None else (
            f"{statistics.median(reference.wall) / wall:>8.2f}x{statistics.median(reference.cpu) / cpu:>8.2f}x")
        return (f"{self.name:<10}{self.first_steps_seconds:>10.1f}{self.graphs:>8d}{self.late_graphs:>6d}"
                f"{1000 * wall:>10.1f}{1000 * cpu:>10.1f}{ratio}")


VARIANTS = {
    "eager": CompileConfig(enabled=False),
    "blocks": CompileConfig(enabled=True, scope="blocks"),
    "model": CompileConfig(enabled=True, scope="model"),
}


def variant_parts(name: str) -> tuple[str, bool]:
    """(compile variant, bf16 autocast) of a ``--compare`` name: ``eager``, or ``eager-bf16`` for the same step
    under bf16 autocast whatever ``--precision`` says (float32 and bf16 interleaved on the same batches)."""
    compile_name, _, cast = name.partition("-")
    if compile_name not in VARIANTS or cast not in ("", "bf16"):
        raise ValueError(f"unknown variant {name!r}; valid: {', '.join(VARIANTS)}, each optionally with -bf16")
    return compile_name, cast == "bf16"


def compare_steps(cfg: DictConfig, module, batches: Iterable, variants: Iterable[str], warmup: int,
                  loss_every: int = 50, autocast: torch.dtype | None = None, log=None) -> list[VariantStats]:
    """Step each variant (a deep copy of ``module``'s model, its own optimizer, the same chunk
    draws) on every batch in turn; warm-up steps (compiles) are timed apart. ``log``: called with a
    line per step as it ends (variant, step, B x T, wall, graphs so far)."""
    runs = []
    for name in variants:
        twin = copy.deepcopy(module)
        twin.chunks.generator.set_state(module.chunks.generator.get_state())  # the same draws
        compile_name, cast = variant_parts(name)
        compile_model(twin.model, VARIANTS[compile_name])
        optimizer, scheduler = make_optimizer(cfg, twin.model)
        runs.append((VariantStats(name), twin, optimizer, scheduler, torch.bfloat16 if cast else autocast))
    clip = cfg.trainer.get("gradient_clip_val")
    batches = list(batches) if not hasattr(batches, "__len__") else batches
    for i, batch in enumerate(batches):
        for stats, twin, optimizer, scheduler, variant_cast in runs:
            graphs = compiled_graph_count()
            device = twin.model.ctc_proj.weight.device
            synchronize(device)
            t0, c0 = time.perf_counter(), time.process_time()
            loss = train_step(twin, optimizer, scheduler, batch, clip, variant_cast)
            synchronize(device)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            new = compiled_graph_count() - graphs
            stats.graphs += new
            if i < warmup:
                stats.first_steps_seconds += wall
            else:
                stats.late_graphs += new
                stats.wall.append(wall)
                stats.cpu.append(cpu)
            if log is not None:
                log(f"{stats.name} step {i} B={batch.feats.size(0)} T={batch.feats.size(1)}: {wall:.2f} s wall, "
                    f"{stats.graphs} graphs{' (warm-up)' if i < warmup else ''}")
            if i % loss_every == 0 or i == len(batches) - 1:
                stats.losses.append((i, float(loss)))
    return [stats for stats, *_ in runs]


def comparison_table(results: list[VariantStats]) -> str:
    lines = [f"{'variant':<10}{'warmup s':>10}{'graphs':>8}{'late':>6}{'ms wall':>10}{'ms CPU':>10}"
             f"{'wall x':>9}{'CPU x':>9}"]
    lines += [r.row(None if r is results[0] else results[0]) for r in results]
    steps = [i for i, _ in results[0].losses]
    lines.append("")
    lines.append(f"{'step':>6}" + "".join(f"{r.name + ' loss':>14}" for r in results))
    for k, step in enumerate(steps):
        lines.append(f"{step:>6}" + "".join(f"{r.losses[k][1]:>14.3f}" for r in results))
    return "\n".join(lines)


def take(loader: Iterable, n: int) -> list:
    """The first ``n`` batches of a loader (cycling epochs), read before any step is timed."""
    out: list = []
    it: Iterator = iter(loader)
    while len(out) < n:
        try:
            out.append(next(it))
        except StopIteration:
            it = iter(loader)
    return out


def time_validation(module, loader: Iterable, chunk_size: int, left_chunks: int) -> tuple[float, float, int]:
    """(wall s, CPU s, utterances) of one validation pass as the LightningModule runs it: the loss,
    and CTC greedy decoding full-context and at ``chunk_size`` (0: not)."""
    from asr.decode import decode_batch

    model = module.model.eval()
    t0, c0, n = time.perf_counter(), time.process_time(), 0
    with torch.no_grad():
        for batch in loader:
            model(batch.feats, batch.feat_lens, batch.tokens, batch.token_lens)
            for chunk, left in ((0, -1), (chunk_size, left_chunks))[: 2 if chunk_size else 1]:
                decode_batch(model, batch.feats, batch.feat_lens, "ctc_greedy", chunk_size=chunk, left_chunks=left)
            n += batch.feats.size(0)
    model.train()
    return time.perf_counter() - t0, time.process_time() - c0, n


def recompile_census(cfg: DictConfig, datamodule, scope: str, max_batches: int | None = None,
                     log=print, epochs: int = 1) -> list[tuple[int, int, int, int]]:
    """(batch index, B, T, graphs so far) at every batch that compiled a graph, over ``epochs`` epochs
    (batch indices run on across epochs; ``max_batches`` bounds each epoch)."""
    from asr.data.features import FbankExtractor
    from asr.model.asr_model import build_asr_model
    from asr.train.checkpoint import model_kwargs_from_config
    from asr.train.chunks import DynamicChunkSampler

    kwargs = model_kwargs_from_config(OmegaConf.to_container(cfg.model, resolve=True),
                                      OmegaConf.to_container(cfg.pos_enc, resolve=True), datamodule.tokenizer)
    encoder = {**kwargs["encoder_kwargs"], "d_model": 16, "num_heads": 2, "ffn_dim": 32}
    narrow = {**kwargs, "encoder_kwargs": encoder, "decoder_heads": 2, "decoder_ffn_dim": 32}
    model = build_asr_model(**narrow).train()
    torch._dynamo.reset()
    graphs = [0]

    def counting_backend(gm, example_inputs):
        graphs[0] += 1
        return gm.forward

    compile_model(model, CompileConfig(enabled=True, scope=scope, backend=counting_backend))
    s = cfg.streaming
    chunks = DynamicChunkSampler(s.p_full, s.max_chunk, s.max_left, s.p_unlimited_left, cfg.seed)
    extractor = FbankExtractor()
    events, seen, i = [], 0, -1
    sampler = datamodule.train_dataloader().sampler
    for epoch in range(epochs):
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)  # the next epoch's shuffle, as training would draw it
        at_start = seen
        for cuts in itertools.islice(sampler, max_batches):
            i += 1
            frames = [extractor.num_frames(round(c.duration * extractor.sample_rate)) for c in cuts]
            texts = [datamodule.tokenizer.encode(" ".join(sup.text for sup in c.supervisions)) for c in cuts]
            b, t, u = len(frames), max(frames), max(len(x) for x in texts)
            feats = torch.randn(b, t, encoder["input_dim"])
            tokens = torch.randint(1, kwargs["vocab_size"] - 1, (b, u))
            token_lens = torch.tensor([len(x) for x in texts])
            tokens = tokens.masked_fill(torch.arange(u)[None] >= token_lens[:, None], -1)
            chunk_size, left_chunks = chunks.sample()
            model(feats, torch.tensor(frames), tokens, token_lens, chunk_size=chunk_size, left_chunks=left_chunks
                  )["loss"].backward()
            if graphs[0] > seen:
                seen = graphs[0]
                events.append((i, b, t, seen))
                log(f"batch {i}: B={b} T={t} chunk=({chunk_size}, {left_chunks}) -> {seen} graphs")
        log(f"epoch {epoch + 1}: {seen - at_start} new graphs, {seen} in all")
    log(f"{i + 1} batches, {seen} graphs, the last at batch {events[-1][0] if events else None}")
    return events
