"""Optimizer guards the configs' ``torch.optim`` factories do not give.

Fused AdamW (``optim.optimizer.fused: true``) updates each parameter, its gradient and its two
moments as flat buffers in one kernel. On CPU (torch 2.11) it does not check that a gradient
is laid out like its parameter: a channels-last Conv2d weight (``asr.model.subsampling``) with a
contiguous gradient is updated element-mismatched and silently wrong (measured: the weight 1.1x
its own scale away from the for-loop AdamW's after 20 steps; with matching layouts the two agree
to 2e-7). Autograd gives a weight gradient its parameter's layout, but a gradient written by
other code (accumulated, all-reduced, assigned by hand) need not keep it, so every step first
re-lays any gradient whose strides differ.
"""

from __future__ import annotations

import torch


def _relay_gradients(optimizer: torch.optim.Optimizer, args, kwargs) -> None:
    for group in optimizer.param_groups:
        for p in group["params"]:
            grad = p.grad
            if grad is not None and grad.stride() != p.stride():
                p.grad = torch.empty_like(p).copy_(grad)  # the parameter's strides, the same values


def guard_fused(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """``optimizer``, with a step pre-hook that gives every gradient its parameter's layout when
    any of its groups is fused (nothing otherwise)."""
    if any(group.get("fused") for group in optimizer.param_groups):
        optimizer.register_step_pre_hook(_relay_gradients)
    return optimizer


def optimizer_takes_found_inf(optimizer: torch.optim.Optimizer) -> bool:
    """Whether ``optimizer.step`` reads a 0-dim ``optimizer.found_inf`` flag on the device and, when
    it is 1, leaves parameters, state and step counts as they were (the fused Adam, AdamW and SGD
    kernels: the protocol ``torch.amp.GradScaler`` uses)."""
    return bool(getattr(optimizer, "_step_supports_amp_scaling", False))


def _drop_found_inf(optimizer: torch.optim.Optimizer, args, kwargs) -> None:
    optimizer.__dict__.pop("found_inf", None)


def drop_found_inf_after_each_step(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """``optimizer``, with a step post-hook that removes the ``found_inf`` flag a step was given,
    so that a later step never reads a stale one."""
    optimizer.register_step_post_hook(_drop_found_inf)
    return optimizer
