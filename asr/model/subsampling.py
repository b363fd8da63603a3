"""Conv2d front end that subsamples feature frames by 4, 6 or 8 (Wenet style).

Axis letters: B batch, T input feature frames, F feature bins, T' encoder frames,
D model dim. The convolutions use no time padding, so encoder frame t depends on
input frames ``[rate * t, rate * t + window)`` only. That makes the output length
a pure function of T and lets the streaming front end feed the convolutions just
the frames it has not consumed yet: no old frame is ever subsampled twice except
the ``window - rate`` frames of overlap that the kernels need.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

# rate -> (kernel, stride) of each conv layer, applied to time and frequency alike.
_LAYOUTS: dict[int, tuple[tuple[int, int], ...]] = {
    4: ((3, 2), (3, 2)),
    6: ((3, 2), (5, 3)),
    8: ((3, 2), (3, 2), (3, 2)),
}
SUBSAMPLING_RATES = tuple(sorted(_LAYOUTS))


def _layout(rate: int) -> tuple[tuple[int, int], ...]:
    if rate not in _LAYOUTS:
        raise ValueError(f"subsampling ({rate}) must be one of {SUBSAMPLING_RATES}.")
    return _LAYOUTS[rate]


def subsampled_length(length, rate: int):
    """Encoder frames produced from ``length`` input frames (int or int tensor; never negative).

    Applies each conv's ``(L - kernel) // stride + 1`` in turn, which is what the
    module computes, e.g. ``((T - 1) // 2 - 1) // 2`` for rate 4.
    """
    for kernel, stride in _layout(rate):
        length = (length - kernel) // stride + 1
    if isinstance(length, torch.Tensor):
        return length.clamp(min=0)
    return max(0, length)


def receptive_window(rate: int) -> int:
    """Input frames that one encoder frame depends on (7 for rate 4, 11 for 6, 15 for 8)."""
    window, step = 1, 1
    for kernel, stride in _layout(rate):
        window += (kernel - 1) * step
        step *= stride
    return window


class Conv2dSubsampling(nn.Module):
    """Conv2d + ReLU stack (no time padding) and a linear projection to D.

    Args:
        input_dim: F, feature bins per frame.
        d_model: D, output size.
        rate: 4, 6 or 8.
        channels: conv channel count; None means D (Wenet's layout). The second
            conv runs at T/2 x F/2 positions and costs channels^2 per position, so
            on CPU it is about half a small model's training step at channels = D;
            a narrower front end (e.g. 64) is several times cheaper.
    """

    def __init__(self, input_dim: int, d_model: int, rate: int = 4, channels: int | None = None) -> None:
        super().__init__()
        layout = _layout(rate)
        width = d_model if channels is None else channels
        if width < 1:
            raise ValueError(f"subsampling channels ({channels}) must be >= 1.")
        freq, widths = input_dim, []
        for kernel, stride in layout:
            freq = (freq - kernel) // stride + 1
            widths.append(freq)
        if freq < 1:
            raise ValueError(f"input_dim ({input_dim}) is too small for subsampling {rate}: no frequency bins left.")
        layers: list[nn.Module] = []
        in_channels = 1
        for kernel, stride in layout:
            layers += [nn.Conv2d(in_channels, width, kernel, stride), nn.ReLU(inplace=True)]
            in_channels = width
        self.conv = nn.Sequential(*layers)
        # Channels-last weights make oneDNN run the convolutions in NHWC, without reordering the
        # activations per call: a faster front end in training and decoding (data/results/speed.md).
        # Same numbers up to rounding order; a state dict loads into it as into any module.
        self.conv.to(memory_format=torch.channels_last)
        self.out = nn.Linear(width * freq, d_model)
        self.rate = rate
        # oneDNN's bfloat16 convolution (torch 2.11) returns garbage, NaN or 1e19, for a strided layer whose output is
        # one frequency bin wide on some CPUs (an Intel Xeon with AMX; an AMD EPYC reads it right), so a front end
        # that narrow runs its convolutions in float32 under autocast. Real front ends (80 bins -> 19) never are.
        self.float32_under_autocast = 1 in widths
        # Input frames needed for the first output; each further output needs `rate` more.
        self.window = receptive_window(rate)
        # Frames of lookahead past the first input frame of an output.
        self.right_context = self.window - 1

    def output_length(self, length):
        """Pure length rule of this module (int or int tensor)."""
        return subsampled_length(length, self.rate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Subsample.

        Args:
            x: (B, T, F) features with T >= ``window``.
        Returns:
            (B, T', D) with ``T' = output_length(T)``.
        """
        if x.size(1) < self.window:
            raise ValueError(
                f"input has {x.size(1)} frames; subsampling {self.rate} needs at least {self.window}."
            )
        if self.float32_under_autocast and torch.is_autocast_enabled(x.device.type):
            with torch.autocast(x.device.type, enabled=False):
                y = self.conv(x.float().unsqueeze(1))
        else:
            y = self.conv(x.unsqueeze(1))  # (B, Ch, T', F'), channels-last: (B, T', F', Ch) in memory
        b, ch, t, f = y.shape
        # Flattened in its memory order (T', F', Ch): a view instead of a copy, and the gradient
        # reaches the last ReLU in the convolution's own layout (a mixed-layout threshold_backward
        # is several times slower). The Linear's weight keeps Wenet's (Ch, F') column order in the
        # state dict and is permuted to match here (D x Ch*F' elements, small beside the activations).
        weight = self.out.weight.view(-1, ch, f).transpose(1, 2).reshape(-1, f * ch)  # (D, F'*Ch)
        return F.linear(y.permute(0, 2, 3, 1).reshape(b, t, f * ch), weight, self.out.bias)  # (B, T', D)
