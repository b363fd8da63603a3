"""LightningModule for CTC + attention (U2/U2++) training with dynamic chunks.

The module receives a built ``AsrModel`` (any module with its API), an optimizer
partial and the typed config groups of ``asr.train.config``; it owns only what
belongs to training: the per-batch chunk draw, the non-finite-loss guard, the LR
schedule and validation metrics. Batches are ``asr.data.batch.Batch``: feats (B, T, F),
feat_lens (B,), tokens (B, U) padded with -1, token_lens (B,), keys, texts.

Non-finite losses: every rank all-reduces a "bad loss" flag on the device, and when any
rank's loss is non-finite the step changes no parameter, no optimizer moment and no
optimizer step count, on every rank; the LR schedule and ``global_step`` still advance.
The skips are counted on the device (``nonfinite_skip_count``) and read on the host only
by the logger at its cadence, by checkpoints and by ``nonfinite_skips``. Two ways, chosen
when training starts:

- On the device, when the optimizer's step takes a ``found_inf`` flag (fused Adam/AdamW,
  ``optim.optimizer.fused: true``), one optimizer step a batch and no gradient scaler: the
  backward runs on every rank as usual and the flag, handed to the optimizer as
  ``found_inf``, makes its kernel leave parameters, moments and step counts as they were.
  The host never waits for the flag.
- On the host otherwise (the flag is read): Lightning refuses a ``None`` from
  ``training_step`` when world_size > 1, because ranks that skip and ranks that do not
  would deadlock in the gradient all-reduce, so when any rank's loss is non-finite every
  rank returns a zero loss detached from the parameters. Its backward fires no DDP hooks
  on any rank, all gradients stay ``None`` after Lightning's ``zero_grad``, and AdamW
  skips parameters without gradients. With several batches a step, only the bad batch
  is left out of the step.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, replace
from typing import Any, Callable

import lightning.pytorch as pl
import torch
from lightning.pytorch.plugins.precision import MixedPrecision, Precision
from lightning.pytorch.utilities import GradClipAlgorithmType
from torch import nn

from asr.decode import decode_batch
from asr.train.checkpoint import TOKENIZER_KEY
from asr.train.compile import CompileConfig, compile_model, compiled_graph_count
from asr.train.chunks import DynamicChunkSampler
from asr.train.config import DebugConfig, FinetuneConfig, SchedulerConfig, StreamingConfig
from asr.train.onsets import place_onsets_at_chunk_edges
from asr.train.optim import drop_found_inf_after_each_step, guard_fused, optimizer_takes_found_inf
from asr.train.rng_state import seed_training_batch
from asr.train.schedule import build_scheduler
from asr.train.wer_sums import WerSums

log = logging.getLogger(__name__)


class AsrLightningModule(pl.LightningModule):
    """Trains ``model`` with its hybrid loss ``model(feats, feat_lens, tokens, token_lens,
    chunk_size, left_chunks)["loss"]``.

    Args:
        model: the AsrModel.
        optimizer: ``params -> Optimizer`` (a Hydra ``_partial_`` AdamW).
        tokenizer: turns hypothesis ids into text for the validation WER.
        scheduler: the ``optim.scheduler`` group (LR schedule).
        streaming: the ``streaming`` group (chunk draws, streaming validation).
        seed: the run's ``seed``; seeds the chunk draws.
        debug: the ``debug`` group (forced NaN loss, for tests).
        build_info: plain data saved as hyper-parameters so that
            ``asr.train.checkpoint.load_model`` can rebuild the model without Hydra.
        tokenizer_files: ``asr.train.checkpoint.pack_tokenizer`` output, stored in every
            checkpoint so it decodes to text wherever it is copied.
        finetune: the ``finetune`` group: encoder frozen for the first N steps, encoder lr.
        compile: the ``compile`` group: ``torch.compile`` the model's blocks (or all of it) in
            place (``asr.train.compile``); the compiled graphs are counted per training step.

    ``scheduler``, ``streaming``, ``finetune`` and ``seed`` are saved as hyper-parameters under those
    names with their YAML keys (``asr.train.config``), beside ``build_info``.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: Callable[..., torch.optim.Optimizer],
        tokenizer: Any,
        scheduler: SchedulerConfig = SchedulerConfig(),
        streaming: StreamingConfig = StreamingConfig(),
        seed: int = 0,
        debug: DebugConfig = DebugConfig(),
        build_info: dict | None = None,
        tokenizer_files: dict | None = None,
        finetune: FinetuneConfig = FinetuneConfig(),
        compile: CompileConfig = CompileConfig(),
    ) -> None:
        super().__init__()
        if streaming.val_chunk_size < 0:
            raise ValueError(f"val_chunk_size ({streaming.val_chunk_size}) must be >= 0 (0 disables it).")
        self.save_hyperparameters(
            {**(build_info or {}), "scheduler": asdict(scheduler), "streaming": asdict(streaming), "seed": seed,
             "finetune": asdict(finetune)}
        )
        self.finetune = finetune
        self.model = model
        self.optimizer_factory = optimizer
        self.tokenizer = tokenizer
        self.scheduler_config = scheduler
        self.chunks = DynamicChunkSampler(
            streaming.p_full, streaming.max_chunk, streaming.max_left, streaming.p_unlimited_left, seed,
            streaming.random_phase, streaming.onset_edge_prob, streaming.onset_edge_frames, streaming.min_chunk,
        )
        self.val_settings = {"val_wer": (0, -1)}
        if streaming.val_chunk_size > 0:
            self.val_settings[f"val_wer_chunk{streaming.val_chunk_size}"] = (
                streaming.val_chunk_size, streaming.val_left_chunks,
            )
        self.wer_sums = {name: WerSums() for name in self.val_settings}
        self.tokenizer_files = tokenizer_files
        self.debug_nan = (debug.nan_on_rank, debug.nan_at_step)
        # Non-persistent: moves with the module, stays out of the weights; checkpoints carry it.
        self.register_buffer("nonfinite_skip_count", torch.zeros((), dtype=torch.long), persistent=False)
        self.register_buffer("logged_chunk_size", torch.zeros(()), persistent=False)
        self.skip_on_device = False  # chosen in on_train_start (module doc)
        self._step_nonfinite: torch.Tensor | None = None  # this step's all-reduced flag, 0-dim float
        self.best_val_wer: float | None = None
        # Compiled in place: the module tree and its state dict stay the eager model's.
        self.compiled = bool(compile_model(self.model, compile))
        self.compiled_graphs = 0  # graphs compiled while this module trained (recompiles included)
        self.last_compile_step: int | None = None

    @property
    def nonfinite_skips(self) -> int:
        """Steps skipped for a non-finite loss so far (reads the device counter on the host)."""
        return int(self.nonfinite_skip_count)

    # ------------------------------------------------------------------ training
    def on_train_start(self) -> None:
        optimizers = self.trainer.optimizers
        self.skip_on_device = (
            len(optimizers) == 1 and optimizer_takes_found_inf(optimizers[0])
            and self.trainer.accumulate_grad_batches == 1
            and getattr(self.trainer.precision_plugin, "scaler", None) is None  # a scaler sets found_inf itself
        )
        log.info("a step with a non-finite loss is skipped %s", "on the device (the optimizer's found_inf)"
                 if self.skip_on_device else "after reading its flag on the host")

    def _flag_nonfinite(self, loss: torch.Tensor) -> torch.Tensor:
        """1.0 on every rank when the loss is non-finite on at least one rank, else 0.0 (0-dim, on
        the device; no host read); counted in ``nonfinite_skip_count``."""
        bad = (~torch.isfinite(loss.detach())).float().reshape(1)
        bad = self.trainer.strategy.reduce(bad, reduce_op="sum").clamp(max=1.0).reshape(())
        self.nonfinite_skip_count += bad.long()
        return bad

    def _any_rank_nonfinite(self, loss: torch.Tensor) -> bool:
        """True on every rank when the loss is non-finite on at least one rank (reads the flag)."""
        return bool(self._flag_nonfinite(loss).item() > 0)

    def _log_skips(self, batch_size: int) -> None:
        self.log("train_nonfinite_skips", self.nonfinite_skip_count.float(), batch_size=batch_size)

    def _zero_loss_on_every_parameter(self) -> torch.Tensor:
        """A zero loss whose backward gives every parameter a zero gradient, so this
        rank still joins the DDP gradient all-reduce of the other ranks' real losses."""
        return sum(p.sum() for p in self.model.parameters() if p.requires_grad) * 0.0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        chunk_size, left_chunks = self.chunks.sample()
        chunk_phase = self.chunks.phase(chunk_size)
        if batch.feats.shape[0] == 0:
            # Under DDP the data module yields an empty batch (every cut unreadable)
            # rather than desynchronising the ranks; keep the flag all-reduce in step too.
            if self.skip_on_device:
                self._step_nonfinite = self._flag_nonfinite(torch.zeros((), device=self.device))
                return self._zero_loss_on_every_parameter()
            if self._any_rank_nonfinite(torch.zeros((), device=self.device)):
                return torch.zeros((), device=self.device, requires_grad=True)
            return self._zero_loss_on_every_parameter()
        feats, feat_lens = self._onsets_at_chunk_edges(batch.feats, batch.feat_lens, chunk_size, chunk_phase)
        out = self.model(
            feats, feat_lens, batch.tokens, batch.token_lens,
            chunk_size=chunk_size, left_chunks=left_chunks, chunk_phase=chunk_phase,
        )
        loss = out["loss"]
        if (self.global_rank, self.global_step) == self.debug_nan:
            loss = loss * float("nan")
        batch_size = int(batch.feats.shape[0])
        if self.skip_on_device:
            # The optimizer skips the update (on_before_optimizer_step); the logged loss is this
            # step's own, non-finite on a skipped step. Logged every step: the host does not know
            # which steps skip.
            self._step_nonfinite = self._flag_nonfinite(loss)
            self._log_skips(batch_size)
        elif self._any_rank_nonfinite(loss):
            self._log_skips(batch_size)
            # Detached zero: backward touches no parameter on any rank (see module doc).
            return torch.zeros((), device=loss.device, requires_grad=True)
        # Not prog_bar: Lightning would read it on the host after every batch; the bar shows it at
        # the logger's cadence (asr.train.progress).
        self.log("train_loss", loss.detach(), batch_size=batch_size)
        for name in ("loss_ctc", "loss_att", "loss_r2l"):
            if name in out and out[name] is not None:
                self.log(f"train_{name}", out[name].detach().float(), batch_size=batch_size)
        # Filled on the device: a Python float would be copied to it, and that copy waits.
        self.log("train_chunk_size", self.logged_chunk_size.fill_(chunk_size), batch_size=batch_size)
        return loss

    def _onsets_at_chunk_edges(
        self, feats: torch.Tensor, feat_lens: torch.Tensor, chunk_size: int, phase: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The chunked batch with chosen onsets moved to chunk edges (``asr.train.onsets``); the batch
        as read when ``onset_edge_prob`` is 0 or the batch is full context."""
        edges = self.chunks.onset_edges(int(feats.shape[0]), chunk_size)
        if edges is None:
            return feats, feat_lens
        subsampling = self.model.encoder.subsampling
        chosen, offsets = (t.to(feats.device) for t in edges)
        return place_onsets_at_chunk_edges(
            feats, feat_lens, chosen, offsets, chunk_size, phase, subsampling.rate, subsampling.window,
        )

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        if self.skip_on_device:
            # Read by the fused kernel on the device; a step post-hook drops it (configure_optimizers).
            optimizer.found_inf = self._step_nonfinite
        # Frozen encoder: no gradient, so AdamW skips it (no update, no weight decay, no
        # moment) and gradient clipping measures the rest. Dropped after the DDP all-reduce,
        # so every rank agrees; the encoder's backward still runs.
        if self.global_step < self.finetune.freeze_encoder_steps:
            for p in self.model.encoder.parameters():
                p.grad = None

    def configure_gradient_clipping(self, optimizer: torch.optim.Optimizer, gradient_clip_val=None,
                                    gradient_clip_algorithm=None) -> None:
        plugin = self.trainer.precision_plugin
        if (gradient_clip_val and optimizer_takes_found_inf(optimizer)
                and isinstance(plugin, MixedPrecision) and plugin.scaler is None):
            # Lightning's mixed-precision plugin refuses to clip for an optimizer that unscales inside its own
            # step (a fused kernel), which matters only beside a gradient scaler. bf16 autocast has none, so
            # the gradients are the true ones and are clipped as every other precision clips them.
            # None when the trainer leaves the algorithm at its default, the norm
            algorithm = GradClipAlgorithmType(gradient_clip_algorithm or GradClipAlgorithmType.NORM)
            Precision.clip_gradients(plugin, optimizer, gradient_clip_val, algorithm)
            return
        self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def _parameter_groups(self) -> list[dict] | Any:
        """All parameters, or with ``finetune.encoder_lr`` two groups: the encoder's at its own peak lr."""
        if self.finetune.encoder_lr is None:
            return self.model.parameters()
        encoder = {id(p) for p in self.model.encoder.parameters()}
        rest = [p for p in self.model.parameters() if id(p) not in encoder]
        return [{"params": list(self.model.encoder.parameters()), "lr": self.finetune.encoder_lr}, {"params": rest}]

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        # Dropout's draws depend only on the run's seed, the rank and the batches trained so far (restored
        # from a checkpoint), so a resumed run draws what the uninterrupted one drew (asr.train.rng_state).
        trained = self.trainer.fit_loop.epoch_loop.batch_progress.total.completed
        seed_training_batch(int(self.hparams["seed"]), self.global_rank, trained)
        if self.compiled:
            self._graphs_before_step = compiled_graph_count()

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if not self.compiled:
            return
        new = compiled_graph_count() - self._graphs_before_step
        if new:  # a compile or recompile: how many and when, so a run shows whether it ever settles
            self.compiled_graphs += new
            self.last_compile_step = int(self.global_step)
        self.log("train_compiled_graphs", float(self.compiled_graphs), batch_size=1)

    def configure_optimizers(self) -> dict:
        optimizer = drop_found_inf_after_each_step(guard_fused(self.optimizer_factory(params=self._parameter_groups())))
        config = self.scheduler_config
        if config.kind == "cosine" and config.total_steps is None:
            estimated = self.trainer.estimated_stepping_batches
            if estimated == float("inf"):
                raise ValueError(
                    "cosine schedule needs optim.scheduler.total_steps or trainer.max_steps "
                    f"(estimated_stepping_batches is {estimated})."
                )
            config = replace(config, total_steps=int(estimated))
        scheduler = build_scheduler(optimizer, **asdict(config))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    # ---------------------------------------------------------------- validation
    def on_validation_epoch_start(self) -> None:
        for sums in self.wer_sums.values():
            sums.reset()

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        batch_size = int(batch.feats.shape[0])
        if batch_size == 0:
            return
        out = self.model(batch.feats, batch.feat_lens, batch.tokens, batch.token_lens)
        self.log("val_loss", out["loss"].float(), batch_size=batch_size, sync_dist=True, prog_bar=True)
        for name, (chunk_size, left_chunks) in self.val_settings.items():
            hyps = decode_batch(
                self.model, batch.feats, batch.feat_lens, "ctc_greedy",
                chunk_size=chunk_size, left_chunks=left_chunks,
            )
            for ref, hyp in zip(batch.texts, hyps):
                self.wer_sums[name].add(ref, self.tokenizer.decode(hyp))

    def on_validation_epoch_end(self) -> None:
        for name, sums in self.wer_sums.items():
            totals = self.trainer.strategy.reduce(sums.as_tensor(self.device), reduce_op="sum")
            wer = WerSums.rate(totals)
            # Already summed over ranks: logging must not average again.
            self.log(name, wer, prog_bar=name == "val_wer", sync_dist=False)
            if name == "val_wer" and not self.trainer.sanity_checking:
                self.best_val_wer = wer if self.best_val_wer is None else min(self.best_val_wer, wer)

    # --------------------------------------------------------------- checkpoints
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        if self.tokenizer_files is not None:
            checkpoint[TOKENIZER_KEY] = self.tokenizer_files
        checkpoint["asr_training_state"] = {
            "chunk_sampler": self.chunks.state_dict(),
            "nonfinite_skips": self.nonfinite_skips,
            "best_val_wer": self.best_val_wer,
        }

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        state = checkpoint.get("asr_training_state")
        if state is None:
            return
        self.chunks.load_state_dict(state["chunk_sampler"])
        self.nonfinite_skip_count.fill_(int(state["nonfinite_skips"]))
        self.best_val_wer = state["best_val_wer"]
