"""Fused AdamW behind asr.train.optim.guard_fused: the same updates as the for-loop AdamW,
whatever layout a gradient arrives in."""

import copy
import functools

import lightning.pytorch as pl
import pytest
import torch
from torch import nn

from asr.train.config import SchedulerConfig, StreamingConfig
from asr.train.module import AsrLightningModule
from asr.train.optim import guard_fused

from helpers import LetterTokenizer, random_batches, tiny_model

KWARGS = {"lr": 3e-3, "betas": (0.9, 0.98), "eps": 1e-9, "weight_decay": 1e-6}


def _conv_net() -> nn.Module:
    torch.manual_seed(0)
    # a channels-last Conv2d weight, as asr.model.subsampling keeps it, beside ordinary parameters
    net = nn.Sequential(nn.Conv2d(8, 8, 3), nn.Flatten(), nn.Linear(8 * 4 * 4, 5))
    net[0].to(memory_format=torch.channels_last)
    return net


def _step_all(nets: dict, optimizers: dict, steps: int = 10) -> None:
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        # the same gradient values for every variant, deliberately contiguous (not the conv weight's layout)
        grads = [torch.randn(p.shape, generator=g) * 0.01 for p in nets["forloop"].parameters()]
        for name, net in nets.items():
            for p, grad in zip(net.parameters(), grads):
                p.grad = grad.clone()
            optimizers[name].step()


@pytest.mark.parametrize("guarded", [True, False])
def test_fused_adamw_matches_the_for_loop_only_when_guarded(guarded):
    net = _conv_net()
    assert net[0].weight.is_contiguous(memory_format=torch.channels_last) and not net[0].weight.is_contiguous()
    nets = {"forloop": net, "fused": copy.deepcopy(net)}
    optimizers = {"forloop": torch.optim.AdamW(nets["forloop"].parameters(), foreach=False, **KWARGS),
                  "fused": torch.optim.AdamW(nets["fused"].parameters(), fused=True, **KWARGS)}
    if guarded:
        guard_fused(optimizers["fused"])
    _step_all(nets, optimizers)
    ref, got = nets["forloop"][0].weight, nets["fused"][0].weight
    err = float((got - ref).abs().max() / ref.abs().max())
    if guarded:
        assert err < 1e-5
        for p, q in zip(nets["fused"].parameters(), nets["forloop"].parameters()):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-7)
    else:  # what the guard is for: torch's fused CPU kernel pairs the elements wrongly
        assert err > 1e-2, "torch's fused AdamW now pairs mismatched layouts right: asr.train.optim's guard may go"


def test_the_guard_leaves_unfused_optimizers_alone():
    opt = torch.optim.AdamW(_conv_net().parameters(), **KWARGS)
    assert guard_fused(opt) is opt and not opt._optimizer_step_pre_hooks
    fused = torch.optim.AdamW(_conv_net().parameters(), fused=True, **KWARGS)
    assert len(guard_fused(fused)._optimizer_step_pre_hooks) == 1


def test_the_lightning_module_guards_a_fused_optimizer():
    fused = functools.partial(torch.optim.AdamW, fused=True, **KWARGS)
    module = AsrLightningModule(model=tiny_model(), optimizer=fused, tokenizer=LetterTokenizer(),
                                scheduler=SchedulerConfig(warmup_steps=2),
                                streaming=StreamingConfig(max_chunk=4, val_chunk_size=2))
    optimizer = module.configure_optimizers()["optimizer"]
    assert optimizer.defaults["fused"] and len(optimizer._optimizer_step_pre_hooks) == 1


class _NormRecordingAdamW(torch.optim.AdamW):
    """AdamW that records the gradients' total norm as its step meets them (after the trainer's clipping)."""

    norms: list[float] = []

    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        grads = [p.grad for group in self.param_groups for p in group["params"] if p.grad is not None]
        self.norms.append(float(torch.nn.utils.get_total_norm(grads)))
        super().step()
        return loss


@pytest.mark.parametrize("fused", [True, False])
def test_bf16_mixed_clips_for_fused_and_for_loop_adamw(tmp_path, fused):
    """Lightning's mixed-precision plugin refuses to clip for a fused optimizer; under bf16 (no gradient scaler)
    the module clips it as any other: every step meets a gradient norm at most the clip value."""
    clip = 1e-3
    torch.manual_seed(0)
    _NormRecordingAdamW.norms = []
    optimizer = functools.partial(_NormRecordingAdamW, fused=fused, **KWARGS)
    module = AsrLightningModule(model=tiny_model(), optimizer=optimizer,
                                tokenizer=LetterTokenizer(), scheduler=SchedulerConfig(warmup_steps=2),
                                streaming=StreamingConfig(max_chunk=4, val_chunk_size=0))
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=3, precision="bf16-mixed", gradient_clip_val=clip,
                         enable_checkpointing=False, enable_model_summary=False, logger=False,
                         enable_progress_bar=False, default_root_dir=tmp_path, num_sanity_val_steps=0,
                         limit_val_batches=0)
    loader = torch.utils.data.DataLoader(random_batches(3), batch_size=None, shuffle=False)
    trainer.fit(module, train_dataloaders=loader)
    assert trainer.global_step == 3 and module.skip_on_device == fused
    norms = _NormRecordingAdamW.norms
    assert len(norms) == 3 and max(norms) <= clip * (1 + 1e-4), norms
