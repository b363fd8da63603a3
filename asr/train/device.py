"""Host-side waits for a device: timings of CUDA work end only once its queued kernels have run."""

from __future__ import annotations

import torch


def synchronize(device: torch.device) -> None:
    """Wait for ``device``'s queued work (a no-op on a CPU, whose ops run as they are called)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
