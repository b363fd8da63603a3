"""Conv2d subsampling: the pure length rule, the receptive window, and slice-exactness for streaming."""

import copy

import pytest
import torch

from asr.model.subsampling import Conv2dSubsampling, receptive_window, subsampled_length

torch.set_num_threads(1)


@pytest.fixture(scope="module", params=[4, 6, 8])
def sub(request):
    torch.manual_seed(0)
    return Conv2dSubsampling(input_dim=16, d_model=8, rate=request.param)


def test_known_windows():
    assert [receptive_window(r) for r in (4, 6, 8)] == [7, 11, 15]
    assert subsampled_length(100, 4) == ((100 - 1) // 2 - 1) // 2
    assert subsampled_length(100, 6) == ((100 - 1) // 2 - 2) // 3
    assert subsampled_length(6, 4) == 0 and subsampled_length(7, 4) == 1 and subsampled_length(0, 8) == 0


def test_output_length_matches_module(sub):
    lengths = list(range(sub.window, sub.window + 3 * sub.rate + 2)) + [101, 257, 1000]
    x = torch.randn(1, max(lengths), 16)
    for t in lengths:
        assert sub(x[:, :t]).shape == (1, sub.output_length(t), 8), t
    as_tensor = sub.output_length(torch.tensor([0, 3, sub.window, 1000]))
    assert as_tensor.tolist() == [0, 0, 1, sub.output_length(1000)]
    # One more output needs exactly `rate` more frames.
    assert sub.output_length(sub.window + sub.rate - 1) == 1 and sub.output_length(sub.window + sub.rate) == 2


def test_too_short_raises(sub):
    with pytest.raises(ValueError, match=f"at least {sub.window}"):
        sub(torch.randn(1, sub.window - 1, 16))


def test_receptive_window(sub):
    """Output t depends on input frames [rate*t, rate*t + window) and on no other."""
    torch.manual_seed(1)
    x = torch.randn(1, sub.window + 4 * sub.rate, 16)
    y = sub(x)
    t = 2
    first, last = sub.rate * t, sub.rate * t + sub.window - 1
    for frame, inside in [(first - 1, False), (first, True), (last, True), (last + 1, False)]:
        x2 = x.clone()
        x2[:, frame] += 5.0
        changed = not torch.allclose(sub(x2)[:, t], y[:, t])
        assert changed == inside, (frame, inside)


def test_slices_reproduce_outputs(sub):
    """Subsampling from input frame rate*t0 gives outputs t0.. exactly (what streaming relies on)."""
    x = torch.randn(2, 90, 16)
    y = sub(x)
    for t0 in (1, 3):
        part = sub(x[:, sub.rate * t0 :])
        assert torch.allclose(part, y[:, t0 : t0 + part.size(1)], atol=1e-6)


def test_bad_rate_and_input_dim():
    with pytest.raises(ValueError, match="one of"):
        Conv2dSubsampling(16, 8, rate=5)
    with pytest.raises(ValueError, match="input_dim"):
        Conv2dSubsampling(4, 8, rate=8)


@pytest.mark.parametrize("rate", [4, 6, 8])
def test_narrow_front_end_keeps_lengths_and_output_size(rate):
    """A conv width other than D changes only the conv channels, not T' or D."""
    narrow = Conv2dSubsampling(input_dim=16, d_model=8, rate=rate, channels=3)
    assert all(m.out_channels == 3 for m in narrow.conv if isinstance(m, torch.nn.Conv2d))
    x = torch.randn(2, 57, 16)
    assert narrow(x).shape == (2, subsampled_length(57, rate), 8)
    with pytest.raises(ValueError, match="channels"):
        Conv2dSubsampling(input_dim=16, d_model=8, rate=rate, channels=0)


def _reference(sub: Conv2dSubsampling, x: torch.Tensor) -> torch.Tensor:
    """float64, the layout Wenet's state dicts assume: contiguous convolutions, out-of-place ReLU,
    the (B, Ch, T', F') map flattened as (T', Ch * F') with channels outermost."""
    y = x.double().unsqueeze(1)
    for layer in sub.conv:
        if isinstance(layer, torch.nn.Conv2d):
            y = torch.nn.functional.conv2d(y, layer.weight.double().contiguous(), layer.bias.double(), layer.stride)
        else:
            y = torch.relu(y)
    b, ch, t, f = y.shape
    return torch.nn.functional.linear(y.transpose(1, 2).reshape(b, t, ch * f), sub.out.weight.double(),
                                      sub.out.bias.double())


@pytest.mark.parametrize("rate,channels", [(4, None), (4, 6), (6, 5), (8, None)])
def test_fast_front_end_equals_the_wenet_layout_reference_with_gradients(rate, channels):
    """The channels-last convolutions, in-place ReLUs and the memory-order flatten (with the Linear's
    weight permuted to match) compute Wenet's front end: outputs and every parameter's gradient."""
    torch.manual_seed(0)
    sub = Conv2dSubsampling(input_dim=40, d_model=8, rate=rate, channels=channels)  # F' > 1 at every rate
    x = torch.randn(3, 40, 40)
    out = sub(x)
    ref = _reference(sub, x)
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)
    grads = torch.autograd.grad(out.square().sum(), list(sub.parameters()))
    ref_grads = torch.autograd.grad(ref.square().sum(), list(sub.parameters()))
    for (name, _), got, want in zip(sub.named_parameters(), grads, ref_grads):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5, msg=name)  # want: float64 math, fp32 leaf


@pytest.mark.parametrize("input_dim, narrow", [(8, True), (80, False)])
def test_a_front_end_one_bin_wide_reads_like_float64_under_bf16_autocast(input_dim, narrow):
    """oneDNN's bf16 strided convolution with a one-bin-wide output returns garbage on some CPUs: such a front end
    runs its convolutions in float32, and under autocast its output stays within bf16's rounding of float64."""
    torch.manual_seed(0)
    sub = Conv2dSubsampling(input_dim, 16, 4, channels=16)
    assert sub.float32_under_autocast is narrow
    x = torch.randn(4, 60, input_dim)
    reference = copy.deepcopy(sub).double()(x.double())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = sub(x)
    assert torch.isfinite(y).all()
    assert float((y.double() - reference).abs().max()) < 0.05 * float(reference.abs().max())
