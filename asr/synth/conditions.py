"""Acoustic conditions baked into synthesized training audio: room, noise, channel, level.

A model trained on clean eSpeak NG output learns eSpeak's signal: its flat, noiseless
harmonics and one spectral tilt. It then fails on any other voice source (about 100%
WER on flite reading the same sentences). Rooms, noise, band limits and equalisers
change exactly what differs between engines and microphones, and leave the words alone.

They are applied once, when the corpus is synthesized: synthesis runs ~300x real
time, while the 2-core training loader has no CPU to spare (speed perturbation in
the loader raised a step from 0.44 s to 0.66 s). Every draw comes from the numpy
Generator handed in (seeded per utterance by the corpus), so a corpus is
reproducible from its seed.

Audio here is float32 in [-1, 1], shape (n,), at ``SAMPLE_RATE``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torchaudio.functional as AF

from asr.data.audio import cached_resampler
from asr.data.augment import mix_noise
from asr.data.features import SAMPLE_RATE

NOISE_COLOURS = {"white": 0.0, "pink": 1.0, "brown": 2.0}  # power spectrum ~ 1 / f^exponent
NOISE_FLOOR_HZ = 60.0
TELEPHONE_RATE = 8000
TELEPHONE_BAND_HZ = (300.0, 3400.0)


@dataclass(frozen=True)
class ConditionRanges:
    """How often each condition occurs and the range its parameters are drawn from (uniform)."""

    reverb_prob: float = 0.4
    rt60_s: tuple[float, float] = (0.15, 0.9)  # time for the reverberant tail to fall by 60 dB
    drr_db: tuple[float, float] = (-3.0, 12.0)  # direct path energy over the tail's
    noise_prob: float = 0.45
    snr_db: tuple[float, float] = (5.0, 30.0)
    babble_share: float = 0.3  # of the noisy utterances: other sentences as the noise
    babble_talkers: tuple[int, int] = (3, 6)
    # of the noisy utterances that are not babble: music-like tones (:func:`music_like`) as the noise.
    # Drawn only when > 0, so the draws of ranges without music stay as they were.
    music_share: float = 0.0
    band_prob: float = 0.35
    telephone_share: float = 0.3  # of the band-limited utterances: 8 kHz, 300-3400 Hz, mu-law
    lowpass_hz: tuple[float, float] = (3000.0, 7000.0)
    highpass_hz: tuple[float, float] = (50.0, 300.0)
    eq_prob: float = 0.5
    eq_bands: tuple[int, int] = (1, 3)
    eq_gain_db: tuple[float, float] = (-10.0, 10.0)
    eq_center_hz: tuple[float, float] = (150.0, 6000.0)
    eq_q: tuple[float, float] = (0.5, 2.5)
    peak_dbfs: tuple[float, float] = (-30.0, -1.0)  # the utterance's final peak level

    def __post_init__(self) -> None:
        for name in ("reverb_prob", "noise_prob", "babble_share", "music_share", "band_prob", "telephone_share",
                     "eq_prob"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        for name in ("rt60_s", "drr_db", "snr_db", "babble_talkers", "lowpass_hz", "highpass_hz", "eq_bands",
                     "eq_gain_db", "eq_center_hz", "eq_q", "peak_dbfs"):
            low, high = getattr(self, name)
            if low > high:
                raise ValueError(f"{name} range is empty: {low} > {high}")
        if self.peak_dbfs[1] > 0.0:
            raise ValueError(f"peak_dbfs must stay at or below 0 dBFS, got {self.peak_dbfs}")
        if self.lowpass_hz[1] >= SAMPLE_RATE / 2:
            raise ValueError(f"lowpass_hz must stay below Nyquist ({SAMPLE_RATE / 2} Hz), got {self.lowpass_hz}")


@dataclass(frozen=True)
class Conditions:
    """The conditions drawn for one utterance (what `apply_conditions` does, in that order)."""

    rt60_s: float | None = None
    drr_db: float = 0.0
    noise: str | None = None  # a colour of NOISE_COLOURS, "babble" or "music"
    babble_talkers: int = 0
    snr_db: float = 0.0
    telephone: bool = False
    lowpass_hz: float | None = None
    highpass_hz: float | None = None
    eq: tuple[tuple[float, float, float], ...] = ()  # (center Hz, gain dB, Q) per peaking band
    peak_dbfs: float = -1.0
    seed: int = 0  # for the impulse response and the coloured noise

    def describe(self) -> str:
        """A short tag for the manifest, e.g. 'rt60=0.42,pink@12dB,lp=5200,eq2,peak=-9'."""
        parts = []
        if self.rt60_s is not None:
            parts.append(f"rt60={self.rt60_s:.2f}")
        if self.noise is not None:
            parts.append(f"{self.noise}@{self.snr_db:.0f}dB")
        if self.telephone:
            parts.append("telephone")
        if self.lowpass_hz is not None:
            parts.append(f"lp={self.lowpass_hz:.0f}")
        if self.highpass_hz is not None:
            parts.append(f"hp={self.highpass_hz:.0f}")
        if self.eq:
            parts.append(f"eq{len(self.eq)}")
        parts.append(f"peak={self.peak_dbfs:.0f}")
        return ",".join(parts)


def _uniform(rng: np.random.Generator, bounds: tuple[float, float]) -> float:
    return float(rng.uniform(bounds[0], bounds[1]))


def draw_conditions(rng: np.random.Generator, ranges: ConditionRanges) -> Conditions:
    """One utterance's conditions. The draw order is fixed: it is part of the corpus's reproducibility."""
    reverb = rng.random() < ranges.reverb_prob
    rt60, drr = _uniform(rng, ranges.rt60_s), _uniform(rng, ranges.drr_db)
    noisy = rng.random() < ranges.noise_prob
    babble = rng.random() < ranges.babble_share
    colour = str(rng.choice(sorted(NOISE_COLOURS)))
    talkers = int(rng.integers(ranges.babble_talkers[0], ranges.babble_talkers[1] + 1))
    snr = _uniform(rng, ranges.snr_db)
    band = rng.random() < ranges.band_prob
    telephone = rng.random() < ranges.telephone_share
    lowpass, highpass = _uniform(rng, ranges.lowpass_hz), _uniform(rng, ranges.highpass_hz)
    n_eq = int(rng.integers(ranges.eq_bands[0], ranges.eq_bands[1] + 1)) if rng.random() < ranges.eq_prob else 0
    eq = tuple((_uniform(rng, ranges.eq_center_hz), _uniform(rng, ranges.eq_gain_db), _uniform(rng, ranges.eq_q))
               for _ in range(n_eq))
    peak, seed = _uniform(rng, ranges.peak_dbfs), int(rng.integers(0, 2**31 - 1))
    music = ranges.music_share > 0 and rng.random() < ranges.music_share
    return Conditions(
        rt60_s=rt60 if reverb else None, drr_db=drr,
        noise=("babble" if babble else "music" if music else colour) if noisy else None,
        babble_talkers=talkers if noisy and babble else 0, snr_db=snr,
        telephone=band and telephone,
        lowpass_hz=lowpass if band and not telephone else None,
        highpass_hz=highpass if band and not telephone else None,
        eq=eq, peak_dbfs=peak, seed=seed,
    )


def impulse_response(rt60_s: float, drr_db: float, rng: np.random.Generator) -> np.ndarray:
    """(m,) a synthetic room: a direct path, then exponentially decaying noise reaching -60 dB at rt60_s.

    The tail starts 2-8 ms after the direct path (a nearest wall) and its energy is
    ``drr_db`` below the direct path's.
    """
    length = int(min(1.5 * rt60_s, 1.2) * SAMPLE_RATE)
    t = np.arange(length) / SAMPLE_RATE
    tail = rng.standard_normal(length) * np.exp(-6.9078 * t / rt60_s)  # ln(1000) = 6.9078: amplitude -60 dB
    tail[: int(rng.uniform(0.002, 0.008) * SAMPLE_RATE)] = 0.0
    tail *= np.sqrt(10.0 ** (-drr_db / 10.0) / max(float(np.sum(tail**2)), 1e-12))
    tail[0] = 1.0
    return tail.astype(np.float32)


def coloured_noise(n: int, colour: str, rng: np.random.Generator) -> np.ndarray:
    """(n,) unit-power Gaussian noise whose power spectrum falls as 1 / f^exponent of its colour."""
    if colour not in NOISE_COLOURS:
        raise ValueError(f"unknown noise colour {colour!r}; valid: {sorted(NOISE_COLOURS)}")
    spectrum = np.fft.rfft(rng.standard_normal(n))
    # flat below NOISE_FLOOR_HZ and nothing at DC: otherwise brown noise's power sits below
    # 20 Hz, where it is inaudible and outside the filterbank, and the SNR would mean nothing
    freqs = np.maximum(np.fft.rfftfreq(n, d=1.0 / SAMPLE_RATE), NOISE_FLOOR_HZ)
    spectrum *= freqs ** (-NOISE_COLOURS[colour] / 2.0)
    spectrum[0] = 0.0
    noise = np.fft.irfft(spectrum, n)
    return (noise / max(float(np.sqrt(np.mean(noise**2))), 1e-12)).astype(np.float32)


MUSIC_CHORD_S = (0.4, 2.0)  # how long a chord of music_like holds
MUSIC_PARTIALS = (3, 7)


def music_like(n: int, rng: np.random.Generator) -> np.ndarray:
    """(n,) unit-power music-like tones: held chords of 2-4 notes (110-880 Hz, each with harmonics falling
    1/k), gliding slowly in pitch and swelling in level, crossfaded from one chord to the next."""
    out = np.zeros(n)
    start = 0
    fade = int(0.05 * SAMPLE_RATE)
    while start < n:
        length = min(int(rng.uniform(*MUSIC_CHORD_S) * SAMPLE_RATE), n - start)
        t = np.arange(length + fade) / SAMPLE_RATE
        chord = np.zeros(t.size)
        for _ in range(int(rng.integers(2, 5))):
            f0 = 110.0 * 2 ** rng.uniform(0.0, 3.0)
            glide = 1.0 + rng.uniform(-0.02, 0.02) * t / max(t[-1], 1e-9)
            partials = int(rng.integers(*MUSIC_PARTIALS))
            for k in range(1, partials + 1):
                if f0 * k < SAMPLE_RATE / 2 - 500:
                    phase = 2 * np.pi * np.cumsum(f0 * k * glide) / SAMPLE_RATE + rng.uniform(0, 2 * np.pi)
                    chord += np.sin(phase) / k
        chord *= 1.0 + 0.3 * np.sin(2 * np.pi * rng.uniform(0.5, 6.0) * t)  # tremolo
        ramp = np.minimum(1.0, np.minimum(np.arange(t.size), t.size - 1 - np.arange(t.size)) / fade)
        end = min(n, start + t.size)
        out[start:end] += (chord * ramp)[: end - start]
        start += length
    return (out / max(float(np.sqrt(np.mean(out**2))), 1e-12)).astype(np.float32)


def babble_noise(talkers: list[np.ndarray], n: int, rng: np.random.Generator) -> np.ndarray:
    """(n,) the sum of several other utterances, each looped to n samples from a random start."""
    out = np.zeros(n, dtype=np.float32)
    for speech in talkers:
        if speech.size == 0:
            continue
        start = int(rng.integers(0, speech.size))
        looped = np.resize(np.roll(speech, -start), n)  # np.resize repeats the array to n
        out += looped / max(float(np.sqrt(np.mean(speech**2))), 1e-12)
    return out


def _fft_convolve(signal: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """(n,) * (m,) -> (n,): the first n samples of the full convolution (the tail past the end is cut)."""
    size = signal.size + kernel.size - 1
    nfft = 1 << (size - 1).bit_length()
    return np.fft.irfft(np.fft.rfft(signal, nfft) * np.fft.rfft(kernel, nfft), nfft)[: signal.size]


COMPANDING_LAWS = ("mu", "a")  # G.711's two 8-bit laws: mu-law (America, Japan), A-law (elsewhere)
A_LAW = 87.6


def _a_law_8bit(x: torch.Tensor) -> torch.Tensor:
    """(n,) in [-1, 1] -> (n,): G.711 A-law compressed, quantized to 256 levels, expanded back."""
    mag = x.abs()
    log_a = 1.0 + float(np.log(A_LAW))
    compressed = torch.where(mag < 1.0 / A_LAW, A_LAW * mag / log_a,
                             (1.0 + torch.log((A_LAW * mag).clamp_min(1.0))) / log_a)
    quantized = torch.round(compressed * 127.5 - 0.5).clamp(0, 127) / 127.5 + 0.5 / 127.5  # 128 levels a sign
    expanded = torch.where(quantized < 1.0 / log_a, quantized * log_a / A_LAW,
                           torch.exp(quantized * log_a - 1.0) / A_LAW)
    return torch.sign(x) * expanded


def telephone_channel(wav: torch.Tensor, band_hz: tuple[float, float] = TELEPHONE_BAND_HZ, law: str = "mu",
                      rate: int = TELEPHONE_RATE) -> torch.Tensor:
    """(n,) -> (n,): through a ``rate`` Hz channel passing ``band_hz``, 8-bit ``law`` companding, and back.

    The input's peak must stay far below 1 (torchaudio's biquads clamp their output to [-1, 1]).
    """
    if law not in COMPANDING_LAWS:
        raise ValueError(f"unknown companding law {law!r}; valid: {COMPANDING_LAWS}")
    if not 0.0 < band_hz[0] < band_hz[1] < rate / 2:
        raise ValueError(f"telephone band {band_hz} must lie inside (0, {rate / 2}) Hz, low edge first")
    n = wav.shape[0]
    narrow = cached_resampler(SAMPLE_RATE, rate)(wav)
    narrow = AF.highpass_biquad(narrow, rate, band_hz[0])
    narrow = AF.lowpass_biquad(narrow, rate, band_hz[1])
    peak = narrow.abs().max().clamp_min(1e-6)
    unit = (narrow / peak).clamp(-1.0, 1.0)
    coded = (AF.mu_law_decoding(AF.mu_law_encoding(unit, 256), 256) if law == "mu" else _a_law_8bit(unit)) * peak
    wide = cached_resampler(rate, SAMPLE_RATE)(coded)
    return torch.nn.functional.pad(wide, (0, max(0, n - wide.shape[0])))[:n]


def apply_conditions(audio: np.ndarray, cond: Conditions, babble: list[np.ndarray] | None = None) -> np.ndarray:
    """(n,) float32 -> (n,) float32: room, then noise, then channel (band, equaliser), then level.

    The order is the physical one: the room reverberates the voice, the noise joins at
    the microphone, and the channel shapes both. ``babble`` holds the other
    utterances (float32) when ``cond.noise == "babble"``.
    """
    if audio.ndim != 1:
        raise ValueError(f"expected mono audio of shape (n,), got {audio.shape}")
    n = audio.size
    if n == 0:
        return audio.astype(np.float32)
    rng = np.random.default_rng(cond.seed)
    out = audio.astype(np.float64)
    if cond.rt60_s is not None:
        out = _fft_convolve(out, impulse_response(cond.rt60_s, cond.drr_db, rng).astype(np.float64))
    if cond.noise is not None:
        if cond.noise == "babble":
            if not babble:
                raise ValueError("babble noise needs the other utterances (babble=[...])")
            noise = babble_noise(babble, n, rng).astype(np.float64)
        elif cond.noise == "music":
            noise = music_like(n, rng).astype(np.float64)
        else:
            noise = coloured_noise(n, cond.noise, rng).astype(np.float64)
        out = mix_noise(torch.from_numpy(out), torch.from_numpy(noise), cond.snr_db).numpy()
    # torchaudio's biquads clamp their output to [-1, 1]: filter at a level far below it
    # (+10 dB on three overlapping bands still fits), the final level is set afterwards
    peak = float(np.max(np.abs(out)))
    wav = torch.from_numpy((out * (0.01 / peak if peak > 0.0 else 1.0)).astype(np.float32))
    if cond.telephone:
        wav = telephone_channel(wav)
    if cond.highpass_hz is not None:
        wav = AF.highpass_biquad(wav, SAMPLE_RATE, cond.highpass_hz)
    if cond.lowpass_hz is not None:
        # twice: a 4th-order slope, so the band above the cutoff is really gone
        wav = AF.lowpass_biquad(AF.lowpass_biquad(wav, SAMPLE_RATE, cond.lowpass_hz), SAMPLE_RATE, cond.lowpass_hz)
    for center, gain, q in cond.eq:
        wav = AF.equalizer_biquad(wav, SAMPLE_RATE, center, gain, q)
    out = wav.numpy().astype(np.float64)
    peak = float(np.max(np.abs(out)))
    if peak > 0.0:
        out *= 10.0 ** (cond.peak_dbfs / 20.0) / peak
    return out.astype(np.float32)
