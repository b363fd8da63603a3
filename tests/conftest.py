"""Fixtures shared by several test folders: one tiny synthetic corpus (about a minute of audio),
and the devices the model, streaming and training tests run on."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from asr.synth.corpus import SynthConfig, build_synth_corpus

TINY = dict(train_hours=0.012, dev_hours=0.002, test_hours=0.002, long_hours=0.005)


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("synth")
    build_synth_corpus(SynthConfig(str(out), seed=3, workers=1, **TINY), log=lambda *_: None)
    return out


# cpu always; cuda too where a GPU is present (scripts/gpu_check.py runs the suite there).
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(params=DEVICES)
def device(request) -> torch.device:
    """Each device the tests can use: model code must take its device from its inputs.

    On cuda, TensorFloat-32 is off for the test: cuDNN's convolutions use it by default (10-bit
    mantissas, differences near 1e-3), which would hide our own errors below that size. The tests
    compare against the CPU and against the chunk-masked forward at fp32 tolerances.
    """
    if request.param != "cuda":
        yield torch.device(request.param)
        return
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield torch.device(request.param)
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


@pytest.fixture
def cpu_bf16_without_onednn():
    """CPU bf16 autocast with oneDNN's kernels off for the test.

    On CPUs with AMX (this CI host's Xeon has amx_bf16), oneDNN's bf16 conv2d returned
    non-finite values for finite inputs depending on what ran before in the process (the
    subsampling's two convs under autocast: non-finite in 126 of 200 random inputs in one
    process, 0 of 100 in a fresh one; the same input in fp32, or in bf16 through ATen's own
    kernels, always finite). These tests check our dtype handling for the GPU recipe, not
    oneDNN, so they use ATen's kernels.
    """
    with torch.backends.mkldnn.flags(enabled=False):
        yield
