"""Causal per-utterance mean normalization of feature frames (online CMN), optionally speech-gated.

Axis letters: B batch, T frames, F feature bins.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from asr.model.tracing import tracing

NATS_PER_DB = math.log(10.0) / 10.0  # log-mel is the natural log of a power: 1 dB = 0.2303 nats
FRAMES_PER_S = 100.0  # feature frames every 10 ms (asr.data.features.FRAME_SHIFT_MS; asr/model imports no data code)


@dataclass(frozen=True)
class SpeechGate:
    """Which frames the running mean learns from: the ones near the speech level.

    Why: a running mean that learns from every frame drifts towards the room during a lead-in,
    a pause or a silent tail (exact zeros, a hum, a fan), and the first words after it arrive
    off-centre in every bin. Speech is loud against those: a frame counts when its level
    (the mean log-mel over the bins, e_t) is near the recent speech level, tracked causally as

        R_t = max(e_t, R_{t-1} - decay)        R_{-1} = the global mean's level
        frame t counts  <=>  e_t >= R_t - margin  and  e_t >= R_{-1} - floor

    R jumps to a louder frame at once and falls slowly in silence, so a pause is judged
    against the speech before it; the floor keeps digital silence and faint floors out
    whatever the tracker did. A frame that does not count is still normalized (by the mean
    of the frames that did).

    A loud noise floor (white noise at -50 dBFS reads only about 4 dB under the global mean's
    level) passes both tests: no level tells it from speech. What tells it apart is that it
    stays put. With ``noise_snr_db`` > 0 a second tracker follows the quietest recent level,

        N_t = min(e_t, N_{t-1} + rise)        N_{-1} = above any frame (the first frame sets it)
        frame t also needs  e_t >= N_t + noise_snr

    so a stationary floor, whatever its level, sits within ``noise_snr`` of N and does not
    count, while speech, which rises well above its own pauses and closures, does. N rises
    slowly (``noise_rise_db_per_s``) so that it follows a floor that gets louder. The cost: a
    frame within ``noise_snr`` of the quietest frame so far never counts, the stream's first
    frame included.

    Args:
        margin_db: frames more than this below the tracked level do not count (> 0).
        decay_db_per_s: how fast the tracked level falls while frames are quieter (> 0).
        floor_db: frames more than this below the global mean's level never count (> 0).
        noise_snr_db: frames less than this above the tracked noise floor do not count (0: no
            noise tracker).
        noise_rise_db_per_s: how fast the tracked noise floor rises while frames are louder (> 0).
    """

    margin_db: float = 20.0
    decay_db_per_s: float = 1.0
    floor_db: float = 50.0
    noise_snr_db: float = 0.0
    noise_rise_db_per_s: float = 3.0

    def __post_init__(self) -> None:
        for name in ("margin_db", "decay_db_per_s", "floor_db", "noise_rise_db_per_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"SpeechGate.{name} ({getattr(self, name)}) must be > 0.")
        if not self.noise_snr_db >= 0:
            raise ValueError(f"SpeechGate.noise_snr_db ({self.noise_snr_db}) must be >= 0 (0: no noise tracker).")

    @property
    def margin(self) -> float:
        return self.margin_db * NATS_PER_DB

    @property
    def decay(self) -> float:
        """Nats per frame."""
        return self.decay_db_per_s * NATS_PER_DB / FRAMES_PER_S

    @property
    def floor(self) -> float:
        return self.floor_db * NATS_PER_DB

    @property
    def noise_snr(self) -> float:
        return self.noise_snr_db * NATS_PER_DB

    @property
    def noise_rise(self) -> float:
        """Nats per frame."""
        return self.noise_rise_db_per_s * NATS_PER_DB / FRAMES_PER_S


# Where the noise tracker's floor starts, in nats above the global mean's level (434 dB: above any
# frame). The state holds the floor as its depth below this, so a new stream's state is all zeros,
# as sherpa-onnx makes it.
NOISE_CEILING = 100.0


@dataclass
class CmnState:
    """Where a running mean stands after some frames; leading axes (...) as the frames' (none for one stream).

    sums: (..., F) float64, the sum of the frames that counted.
    count: (...,) float64, how many frames counted.
    level: (...,) float64, the gate's tracked level minus the global mean's level (0 at the start; unused
        without a gate).
    noise: (...,) float64, :data:`NOISE_CEILING` minus the noise tracker's floor (against the global
        mean's level); 0 at the start, the floor at the ceiling; unused without the tracker.
    """

    sums: torch.Tensor
    count: torch.Tensor
    level: torch.Tensor
    noise: torch.Tensor


class OnlineCmn:
    """Causal per-utterance mean normalization, in front of the model's global CMVN.

    Why: a model that only ever subtracts one global mean learns the long-term spectrum of
    its training engines; a voice with another spectral balance (flite's, a new microphone)
    then starts off-centre in every bin. Frame t here gets the running mean of its own
    utterance's frames instead, started from the global mean as if that had been seen
    for ``prior_frames`` frames (so the first frames, with little evidence, stay near it):

        m_t = (prior_frames * global_mean + sum_{s<=t} w_s x_s) / (prior_frames + sum_{s<=t} w_s)
        y_t = x_t - m_t + global_mean

    with w_s = 1 for every frame, or, with a :class:`SpeechGate`, w_s = 1 only for frames near
    the speech level; the model's global CMVN, (y - global_mean) * istd, finishes the job.
    Causal, so a stream normalizes frame by frame exactly as the whole utterance would be
    (:meth:`stream`), and padding after an utterance never changes its frames.
    Sums run in float64: a streamed and a one-shot pass agree to float32 rounding.

    Args:
        global_mean: (F,) the training set's mean (the model's ``cmvn_mean``).
        prior_frames: weight of the global mean, in frames (> 0).
        gate: None: every frame counts; else the frames near the speech level only.
    """

    def __init__(self, global_mean: torch.Tensor, prior_frames: float, gate: SpeechGate | None = None) -> None:
        if not prior_frames > 0:
            raise ValueError(f"prior_frames ({prior_frames}) must be > 0")
        global_mean = torch.as_tensor(global_mean, dtype=torch.float64)
        if global_mean.dim() != 1:
            raise ValueError(f"global_mean must be (F,), got shape {tuple(global_mean.shape)}")
        self.global_mean = global_mean
        self.prior_frames = float(prior_frames)
        self.gate = gate

    def initial_state(self, lead: tuple[int, ...] = (), device=None) -> CmnState:
        """The state before any frame, for frames with leading axes ``lead``."""
        zeros = torch.zeros(lead, dtype=torch.float64, device=device)
        return CmnState(zeros.unsqueeze(-1).expand(*lead, self.global_mean.numel()).clone(), zeros, zeros.clone(),
                        zeros.clone())

    def running(self, x: torch.Tensor, state: CmnState) -> tuple[torch.Tensor, CmnState]:
        """x (..., T, F) float64 frames after ``state`` -> the mean m_t of each frame (..., T, F) and the
        running state after each frame (sums (..., T, F), count, level and noise (..., T))."""
        mean = self.global_mean.to(x.device)
        gate = self.gate
        if gate is None:
            weight = torch.ones_like(x[..., 0])  # (..., T)
            level = state.level.unsqueeze(-1).expand_as(weight)
            noise = state.noise.unsqueeze(-1).expand_as(weight)
        else:
            energy = x.mean(-1) - mean.mean()  # (..., T) each frame's level against the global mean's
            level = decaying_peak(energy, state.level, gate.decay)  # (..., T) R_t
            counts = (energy >= level - gate.margin) & (energy >= -gate.floor)  # (..., T)
            if gate.noise_snr_db == 0:
                noise = state.noise.unsqueeze(-1).expand_as(level)
            else:
                steps = torch.arange(x.size(-2), dtype=x.dtype, device=x.device)  # (T,)
                # N_t = min(N_{t-1} + r, e_t) unrolled: min(N_{-1} + r(t+1), min_{s<=t} e_s + r(t-s))
                lowered = -running_max(-(energy - gate.noise_rise * steps))  # (..., T)
                before = NOISE_CEILING - state.noise  # (...,) N_{-1}
                floor = torch.minimum(lowered, (before + gate.noise_rise).unsqueeze(-1)) + gate.noise_rise * steps
                counts = counts & (energy >= floor + gate.noise_snr)
                noise = NOISE_CEILING - floor
            weight = counts.to(x.dtype)
        sums = (x * weight.unsqueeze(-1)).cumsum(-2) + state.sums.unsqueeze(-2)  # (..., T, F)
        count = weight.cumsum(-1) + state.count.unsqueeze(-1)  # (..., T)
        frame_mean = (self.prior_frames * mean + sums) / (self.prior_frames + count).unsqueeze(-1)
        return frame_mean, CmnState(sums, count, level, noise)

    def apply(self, feats: torch.Tensor, state: CmnState | None = None) -> tuple[torch.Tensor, CmnState]:
        """Normalize (..., T, F) frames that follow ``state`` (None: the first frames of their utterance).

        Returns (normalized frames in feats' dtype, the state after them) for the next call.
        """
        if feats.size(-1) != self.global_mean.numel():
            raise ValueError(f"feats have {feats.size(-1)} bins, the global mean {self.global_mean.numel()}")
        if state is None:
            state = self.initial_state(tuple(feats.shape[:-2]), feats.device)
        if feats.size(-2) == 0:
            return feats, state
        x = feats.to(torch.float64)
        frame_mean, after = self.running(x, state)
        out = (x - frame_mean + self.global_mean.to(x.device)).to(feats.dtype)
        last = CmnState(after.sums[..., -1, :], after.count[..., -1], after.level[..., -1], after.noise[..., -1])
        return out, last

    def __call__(self, feats: torch.Tensor) -> torch.Tensor:
        """(T, F) or (B, T, F) whole utterances (each row from its first frame) -> normalized, same shape."""
        return self.apply(feats)[0]

    def stream(self) -> OnlineCmnStream:
        return OnlineCmnStream(self)


def decaying_peak(levels: torch.Tensor, before: torch.Tensor, decay: float) -> torch.Tensor:
    """The level that jumps to a louder frame at once and falls by ``decay`` a frame while frames are quieter:
    levels (..., T) after the tracked level ``before`` (...,) -> (..., T) R_t = max(e_t, R_{t-1} - decay),
    R_{-1} = before, computed for all frames at once."""
    steps = torch.arange(levels.size(-1), dtype=levels.dtype, device=levels.device)  # (T,)
    # unrolled: R_t = max(R_{-1} - d(t+1), max_{s<=t} e_s - d(t-s))
    lifted = running_max(levels + decay * steps)  # (..., T)
    return torch.maximum(lifted, (before - decay).unsqueeze(-1)) - decay * steps


def running_max(values: torch.Tensor) -> torch.Tensor:
    """(..., T) -> (..., T), element t the max of elements 0..t.

    ``torch.cummax`` in eager mode; while tracing (an ONNX export has no cummax), the max over
    a (T, T) causal mask: the same numbers, fine for the few frames of a chunk."""
    if not tracing():
        return torch.cummax(values, dim=-1).values
    steps = torch.arange(values.size(-1), device=values.device)
    causal = steps[None, :] <= steps[:, None]  # (T, T): row t sees columns 0..t
    masked = torch.where(causal, values.unsqueeze(-2), torch.full_like(values, -torch.inf).unsqueeze(-2))
    return masked.amax(-1)


class OnlineCmnStream:
    """One utterance fed piece by piece: :meth:`push` gives what :class:`OnlineCmn` gives the whole."""

    def __init__(self, norm: OnlineCmn) -> None:
        self.norm = norm
        self.reset()

    def reset(self) -> None:
        """Forget every frame: the next one is normalized as an utterance's first."""
        self.state: CmnState | None = None

    def push(self, feats: torch.Tensor) -> torch.Tensor:
        """(..., n, F) next frames -> normalized, same shape (the leading axes fixed for the stream)."""
        out, self.state = self.norm.apply(feats, self.state)
        return out
