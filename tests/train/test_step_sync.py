"""The training step never makes the host wait for the device.

A host read of a device value (``.item()``, ``int(t)``, ``bool(t)``, ``.tolist()``), an op whose output
shape depends on the data (``nonzero``, boolean masking) or a copy back to the host stalls the
launch queue until the GPU catches up, so a step with one is as slow as its host. On the CPU a
dispatch mode sees every such op (they all go through ``aten._local_scalar_dense`` or a
data-dependent op) in the model's forward, backward and gradient clipping; on CUDA the whole step,
the optimizer included, runs under ``torch.cuda.set_sync_debug_mode("warn")`` and each warning is
put down to the op that raised it. The one sync left is ATen's CTC loss, which reads the lengths
on the host in its forward and backward (``asr.model.ctc``): the test names it and allows only it.
"""

from __future__ import annotations

import traceback
import warnings

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from asr.model.asr_model import build_asr_model
from tests.train.helpers import VOCAB, tiny_model_kwargs

HOST_READS = {"aten._local_scalar_dense.default", "aten.nonzero.default", "aten.masked_select.default",
              "aten.unique_consecutive.default", "aten._unique2.default", "aten.repeat_interleave.Tensor"}
# ATen's CTC copies the lengths to the host (both directions); nothing else may sync.
ALLOWED_CUDA_SYNCS = {"asr.ctc_nll.default", "asr.ctc_nll_backward.default"}
CASES = [(0, -1, 0, 0), (4, 2, 0, 0), (4, -1, 3, 0), (2, 1, 1, 2)]  # (chunk, left chunks, phase, lookahead)


def _caller() -> str:
    """The innermost frame in this project's package: where a host read was asked for."""
    frames = [f for f in traceback.extract_stack() if "/asr/" in f.filename]
    return f"{frames[-1].filename.split('/asr/')[-1]}:{frames[-1].lineno}" if frames else "outside asr/"


class OpLog(TorchDispatchMode):
    """Records the ops the step runs: ``host_reads`` those in HOST_READS and boolean indexing; with
    ``watch_warnings``, ``syncing`` the ops during which a CUDA sync warning was raised."""

    def __init__(self, watch_warnings: list | None = None) -> None:
        super().__init__()
        self.host_reads: list[str] = []
        self.syncing: set[str] = set()
        self.warnings = watch_warnings

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        bool_index = name.startswith("aten.index") and any(
            isinstance(i, torch.Tensor) and i.dtype == torch.bool for a in args if isinstance(a, (list, tuple))
            for i in a)
        if name in HOST_READS or bool_index:
            self.host_reads.append(f"{name} at {_caller()}")
        seen = len(self.warnings) if self.warnings is not None else 0
        out = func(*args, **(kwargs or {}))
        if self.warnings is not None and len(self.warnings) > seen:
            self.syncing.add(name)
        return out


def _model_and_batch(device, lookahead: int):
    kwargs = tiny_model_kwargs()
    kwargs["encoder_kwargs"] = {**kwargs["encoder_kwargs"], "chunk_lookahead": lookahead}
    torch.manual_seed(0)
    model = build_asr_model(**kwargs).to(device).train()
    g = torch.Generator().manual_seed(1)
    feats = torch.randn(3, 96, 8, generator=g).to(device)
    feat_lens = torch.tensor([96, 80, 61], device=device)
    tokens = torch.randint(1, VOCAB - 1, (3, 5), generator=g).to(device)
    token_lens = torch.tensor([5, 4, 2], device=device)
    tokens = tokens.masked_fill(torch.arange(5, device=device)[None] >= token_lens[:, None], -1)
    return model, (feats, feat_lens, tokens, token_lens)


@pytest.mark.parametrize("chunk,left,phase,lookahead", CASES)
def test_forward_backward_and_clipping_read_nothing_on_the_host(chunk, left, phase, lookahead):
    if lookahead and not chunk:
        pytest.skip("lookahead only shapes chunked batches")
    model, batch = _model_and_batch(torch.device("cpu"), lookahead)
    with OpLog() as ops:
        loss = model(*batch, chunk_size=chunk, left_chunks=left, chunk_phase=phase)["loss"]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    assert ops.host_reads == [], f"host reads in the training step: {ops.host_reads}"
    assert torch.isfinite(loss) and all(p.grad is not None for p in model.encoder.parameters())


def test_the_op_log_sees_host_reads():
    with OpLog() as ops:
        x = torch.arange(4.0)
        int(x.max()), bool(x.any()), x[x > 1], x.nonzero(), x.tolist()
    names = [read.split(" at ")[0] for read in ops.host_reads]
    assert names.count("aten._local_scalar_dense.default") >= 2
    assert "aten.nonzero.default" in names and any(n.startswith("aten.index") for n in names)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("chunk,left,phase,lookahead", CASES)
def test_cuda_step_syncs_only_in_ctc(chunk, left, phase, lookahead):
    if lookahead and not chunk:
        pytest.skip("lookahead only shapes chunked batches")
    device = torch.device("cuda")
    model, batch = _model_and_batch(device, lookahead)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    for step in range(2):  # the second step: kernels loaded, optimizer state allocated
        torch.cuda.synchronize()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                with OpLog(caught) as ops:
                    loss = model(*batch, chunk_size=chunk, left_chunks=left, chunk_phase=phase)["loss"]
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
            finally:
                torch.cuda.set_sync_debug_mode(0)
        torch.cuda.synchronize()
    assert ops.syncing <= ALLOWED_CUDA_SYNCS, f"ops that synchronized: {sorted(ops.syncing - ALLOWED_CUDA_SYNCS)}"
    assert ops.host_reads == [], f"host reads in the training step: {ops.host_reads}"
    assert torch.isfinite(loss)
