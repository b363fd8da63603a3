"""The GPU path, checked without a GPU.

* ``device`` (tests/conftest.py: cpu, and cuda when present): training forward and backward,
  and streaming, run where their inputs are; off the CPU they equal the CPU result.
* meta device: the whole model, a training step (clipping, AdamW) and streaming run on
  tensors without data. Any tensor the code makes on a fixed device (a missing
  ``device=``) meets a meta tensor there and fails, as it would on a GPU.
* bf16 autocast on CPU: the dtype path of the GPU recipe (``trainer=gpu``: bf16-mixed) for a
  few optimizer steps; fp32 parameters and gradients, finite losses close to fp32's.
"""

import pytest
import torch

from asr.model import POSITION_SCHEMES
from asr.model.scorers.base import PlainScorer
from test_compiled import F_IN, tiny_model
from test_compiled import batch as cpu_batch


def batch(device):
    return tuple(x.to(device) for x in cpu_batch(3, 71, seed=71))


def loss_and_grads(model, inputs, chunk_size, left_chunks):
    model.zero_grad(set_to_none=True)
    loss = model(*inputs, chunk_size=chunk_size, left_chunks=left_chunks)["loss"]
    loss.backward()
    return loss.detach(), [p.grad for p in model.parameters()]


@pytest.mark.parametrize("pos_enc", POSITION_SCHEMES)
def test_training_forward_and_backward_run_on_the_inputs_device(device, pos_enc):
    model = tiny_model(pos_enc).to(device).train()
    for chunk_size, left_chunks in ((0, -1), (4, 1)):
        loss, grads = loss_and_grads(model, batch(device), chunk_size, left_chunks)
        assert loss.device.type == device.type and torch.isfinite(loss)
        assert all(g is not None and g.device.type == device.type for g in grads)
        if device.type != "cpu":
            cpu_loss, cpu_grads = loss_and_grads(tiny_model(pos_enc).train(), batch("cpu"), chunk_size, left_chunks)
            torch.testing.assert_close(loss.cpu(), cpu_loss, rtol=1e-4, atol=1e-4)
            for g, c in zip(grads, cpu_grads):
                torch.testing.assert_close(g.cpu(), c, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("pos_enc", POSITION_SCHEMES)
def test_streaming_on_the_inputs_device_equals_the_masked_forward(device, pos_enc):
    enc = tiny_model(pos_enc, online_cmn=0.0).encoder.to(device).eval()
    feats = torch.randn(2, 90, F_IN, generator=torch.Generator().manual_seed(1)).to(device)
    with torch.no_grad():
        expected, _ = enc(feats, torch.full((2,), 90, device=device), 4, 2)
        state = enc.init_state(2, 4, 2)
        outs = []
        for start in range(0, 90, 11):
            out, state = enc.stream_step(feats[:, start : start + 11], state, final=start + 11 >= 90)
            assert out.device.type == device.type
            outs.append(out)
    torch.testing.assert_close(torch.cat(outs, dim=1), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("pos_enc", POSITION_SCHEMES)
def test_model_and_training_step_run_on_the_meta_device(pos_enc):
    with torch.device("meta"):
        model = tiny_model(pos_enc).train()
    assert all(p.is_meta for p in model.parameters()) and all(b.is_meta for b in model.buffers())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    inputs = batch("meta")
    for chunk_size, left_chunks in ((0, -1), (4, 1), (3, -1)):
        out = model(*inputs, chunk_size=chunk_size, left_chunks=left_chunks)
        assert all(v.is_meta and v.shape == () for v in out.values())
        out["loss"].backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
        optimizer.zero_grad()
    assert all(p.is_meta for p in model.parameters())
    enc = model.encoder.eval()
    with torch.no_grad():
        state = enc.init_state(3, 4, 1)
        out, state = enc.stream_step(inputs[0][:, :40], state)
        last, state = enc.stream_step(inputs[0][:, 40:], state, final=True)
        enc_out, _ = enc(inputs[0], inputs[1], 4, 1)
    assert out.is_meta and last.is_meta and out.size(1) + last.size(1) == enc_out.size(1)


@pytest.mark.parametrize("pos_enc", POSITION_SCHEMES)
def test_bf16_autocast_training_steps_on_cpu(pos_enc, cpu_bf16_without_onednn):
    model = tiny_model(pos_enc).train()
    inputs = batch("cpu")
    fp32_loss, _ = loss_and_grads(model, inputs, 4, 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for chunk_size, left_chunks in ((4, 1), (0, -1), (3, -1), (4, 1)):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(*inputs, chunk_size=chunk_size, left_chunks=left_chunks)
        out["loss"].backward()
        assert all(p.dtype == torch.float32 and p.grad.dtype == torch.float32 for p in model.parameters())
        assert all(torch.isfinite(p.grad).all() for p in model.parameters())
        optimizer.step()
        optimizer.zero_grad()
        losses.append(out["loss"].detach())
    assert all(torch.isfinite(loss) and loss.dtype == torch.float32 for loss in losses)
    torch.testing.assert_close(losses[0], fp32_loss, rtol=0.05, atol=0.05)  # bf16 keeps ~3 digits
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        enc = model.encoder.eval()
        state = enc.init_state(3, 4, 1)
        out, _ = enc.stream_step(enc.online_cmn().stream().push(inputs[0]), state, final=True)
    assert torch.isfinite(out).all()


def test_plain_attention_leaves_out_the_cudnn_kernel(device):
    """SDPA prefers cuDNN's kernel for bf16 on recent GPUs (e.g. for the decoder of
    conf/experiment/ablation.yaml: 4 heads of 24); cuDNN plans every new shape on the host, so the
    scorer takes the other fused kernels. Same numbers as the explicit-softmax reference."""
    if device.type != "cuda":
        pytest.skip("cuDNN's attention kernel exists on CUDA only")
    scorer = PlainScorer(num_heads=4, head_dim=24).to(device).train()
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(3, 4, 37, 24, generator=g).to(device, torch.bfloat16).requires_grad_() for _ in range(3))
    mask = (torch.arange(37)[None, None, :] < torch.tensor([37, 30, 21])[:, None, None]).expand(3, 37, 37).to(device)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        out = scorer(q, k, v, mask)
        out.float().square().sum().backward()
    kernels = {event.name for event in prof.events()}
    assert not any("cudnn_attention" in name for name in kernels), sorted(kernels)
    expected = scorer.reference(q.double(), k.double(), v.double(), mask)
    torch.testing.assert_close(out.double(), expected, rtol=0.02, atol=0.02)
