import functools
import json

import lightning.pytorch as pl
import pytest
import torch

from asr.train.config import DebugConfig, FinetuneConfig, SchedulerConfig, StreamingConfig
from asr.train.module import AsrLightningModule
from asr.train.trace import BatchTrace, parameter_checksum

from helpers import LetterTokenizer, random_batches, tiny_model


def _loader(batches):
    return torch.utils.data.DataLoader(batches, batch_size=None, shuffle=False)


def _module(debug=DebugConfig(), **streaming):
    torch.manual_seed(0)
    return AsrLightningModule(
        model=tiny_model(),
        optimizer=functools.partial(torch.optim.AdamW, lr=1e-3, weight_decay=0.01),
        tokenizer=LetterTokenizer(),
        scheduler=SchedulerConfig(warmup_steps=2),
        streaming=StreamingConfig(**{"max_chunk": 4, "val_chunk_size": 2, **streaming}),
        debug=debug,
    )


def _trainer(tmp_path, callbacks=(), **kwargs):
    return pl.Trainer(
        accelerator="cpu", devices=1, max_epochs=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
        gradient_clip_val=5.0, callbacks=list(callbacks), num_sanity_val_steps=0, **kwargs,
    )


def test_forced_nan_skips_the_step_and_is_counted(tmp_path):
    module = _module(debug=DebugConfig(nan_on_rank=0, nan_at_step=1))
    trainer = _trainer(tmp_path, callbacks=[BatchTrace(str(tmp_path / "trace"))])
    trainer.fit(module, train_dataloaders=_loader(random_batches(3)))
    records = [json.loads(line) for line in open(tmp_path / "trace" / "trace_rank0.jsonl")]
    assert [r["step"] for r in records] == [0, 1, 2]
    moved = [r["checksum_before"] != r["checksum_after"] for r in records]
    assert moved == [True, False, True]
    assert module.nonfinite_skips == 1
    assert all(torch.isfinite(p).all() for p in module.parameters())


def test_validation_logs_loss_and_both_wers(tmp_path):
    module = _module()
    trainer = _trainer(tmp_path, limit_train_batches=2)
    trainer.fit(module, train_dataloaders=_loader(random_batches(2)),
                val_dataloaders=_loader(random_batches(2, seed=1)))
    metrics = trainer.callback_metrics
    assert {"val_loss", "val_wer", "val_wer_chunk2"} <= set(metrics)
    assert torch.isfinite(metrics["val_loss"])
    # An untrained model gets words wrong; the best-so-far tracker holds the same value.
    assert float(metrics["val_wer"]) > 0.0
    assert module.best_val_wer == pytest.approx(float(metrics["val_wer"]))


def test_chunk_draws_reach_the_model(tmp_path, monkeypatch):
    module = _module(p_full=0.0, p_unlimited_left=0.0)
    seen = []
    forward = module.model.forward

    def spy(*args, chunk_size=0, left_chunks=-1, **kwargs):
        seen.append((chunk_size, left_chunks))
        return forward(*args, chunk_size=chunk_size, left_chunks=left_chunks, **kwargs)

    monkeypatch.setattr(module.model, "forward", spy)
    _trainer(tmp_path).fit(module, train_dataloaders=_loader(random_batches(4)))
    assert len(seen) == 4
    assert all(1 <= c <= 4 and 0 <= left <= 8 for c, left in seen)


def test_onsets_reach_the_model_at_chunk_edges(tmp_path, monkeypatch):
    """With onset_edge_prob = 1 every utterance with background before its speech trains with its
    onset in the last frames of the batch's chunk; its tokens are the batch's."""
    from asr.train.onsets import first_seeing_frame, speech_onsets

    module = _module(p_full=0.0, random_phase=True, onset_edge_prob=1.0, onset_edge_frames=2)
    batches = random_batches(4, frames=60)
    for b in batches:
        b.feats[:, :13] = -12.0  # 13 frames of background, then speech
    seen = []
    forward = module.model.forward

    def spy(feats, feat_lens, tokens, token_lens, chunk_size=0, left_chunks=-1, chunk_phase=0):
        seen.append((feats.clone(), feat_lens.clone(), tokens.clone(), chunk_size, chunk_phase))
        return forward(feats, feat_lens, tokens, token_lens, chunk_size=chunk_size, left_chunks=left_chunks,
                       chunk_phase=chunk_phase)

    monkeypatch.setattr(module.model, "forward", spy)
    _trainer(tmp_path).fit(module, train_dataloaders=_loader(batches))
    assert len(seen) == 4
    for (feats, lens, tokens, chunk, phase), b in zip(seen, batches):
        assert torch.equal(tokens, b.tokens) and (lens >= b.feat_lens).all()
        onsets = speech_onsets(feats, lens)
        assert (onsets >= 13).all()
        position = (first_seeing_frame(onsets, 4, 7) + phase) % chunk
        assert (position >= chunk - min(2, chunk)).all()


def test_lr_follows_warmup_per_optimizer_step(tmp_path):
    module = _module()
    lrs = []

    class Spy(pl.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            lrs.append(trainer.optimizers[0].param_groups[0]["lr"])

    _trainer(tmp_path, callbacks=[Spy()]).fit(module, train_dataloaders=_loader(random_batches(4)))
    # warmup 2 then inverse sqrt: factors 1/2, 1, sqrt(2/3), sqrt(2/4)
    assert lrs == pytest.approx([1e-3 * f for f in (0.5, 1.0, (2 / 3) ** 0.5, 0.5 ** 0.5)])


def test_the_encoder_is_frozen_for_exactly_the_first_n_steps(tmp_path):
    frozen = 2
    torch.manual_seed(0)
    module = AsrLightningModule(model=tiny_model(), optimizer=functools.partial(torch.optim.AdamW, lr=1e-3),
                                tokenizer=LetterTokenizer(), scheduler=SchedulerConfig(warmup_steps=1),
                                streaming=StreamingConfig(max_chunk=4, val_chunk_size=2),
                                finetune=FinetuneConfig(freeze_encoder_steps=frozen))
    moved = []

    class Watch(pl.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            self.before = [p.detach().clone() for p in pl_module.model.parameters()]
            self.encoder = {id(p) for p in pl_module.model.encoder.parameters()}

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            changed = [not torch.equal(b, p) for b, p in zip(self.before, pl_module.model.parameters())]
            params = list(pl_module.model.parameters())
            moved.append((any(c for c, p in zip(changed, params) if id(p) in self.encoder),
                          any(c for c, p in zip(changed, params) if id(p) not in self.encoder)))

    _trainer(tmp_path, callbacks=[Watch()]).fit(module, train_dataloaders=_loader(random_batches(4)))
    # steps 1..N leave the encoder as it was, step N + 1 moves it; the rest moves at every step
    assert moved == [(step >= frozen, True) for step in range(4)]


def test_bad_val_chunk_raises():
    with pytest.raises(ValueError, match=r"val_chunk_size \(-1\)"):
        AsrLightningModule(
            model=tiny_model(), optimizer=torch.optim.AdamW, tokenizer=LetterTokenizer(),
            streaming=StreamingConfig(val_chunk_size=-1))


def test_parameter_checksum_changes_with_parameters():
    model = tiny_model()
    before = parameter_checksum(model)
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    assert parameter_checksum(model) != before
