"""What a live microphone puts around speech: a lead-in, a tail and a background under it all.

A recognizer that only ever heard trimmed sentences reads a microphone badly: the stream
starts before the speaker does, the room hums, the fan runs, a cheap sound card adds a DC
offset, and a muted input is exact zeros. Train utterances of a profile with
:class:`LiveRanges` get, for ``share`` of them, silence before and after the speech and one
drawn background under the whole utterance (speech added on top), so the model hears the
speech start after seconds of room and stop into it.

Backgrounds (:data:`BACKGROUNDS`), each at an RMS level in dBFS (full scale 1.0):

* ``zeros``: nothing is added (a muted or gated input: exact zeros around the speech);
* ``white``: a white noise floor (a quiet preamp);
* ``room``: mains hum (50 or 60 Hz and harmonics falling 6 dB each) with pink noise 5 dB under it;
* ``fan``: noise band-limited to 80-1200 Hz whose level swells slowly (a fan, an air vent);
* ``dc``: a constant offset plus a faint white floor (a sound card's DC).

Every draw comes from the numpy Generator handed in, so a corpus is reproducible from its seed.
Audio here is float32 in [-1, 1], shape (n,), at ``SAMPLE_RATE``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from asr.data.features import SAMPLE_RATE
from asr.synth.conditions import coloured_noise

BACKGROUNDS = ("zeros", "white", "room", "fan", "dc")
FAN_BAND_HZ = (80.0, 1200.0)
HUM_HARMONICS = 5
DC_FLOOR_DBFS = -85.0  # the faint floor under a DC offset: a real converter is never silent


@dataclass(frozen=True)
class LiveRanges:
    """How often an utterance is made live, and the ranges its lead-in, tail and background are drawn from."""

    share: float = 0.5
    lead_in_s: tuple[float, float] = (0.0, 2.5)
    tail_s: tuple[float, float] = (0.0, 1.2)
    weights: tuple[float, ...] = (0.2, 0.25, 0.25, 0.15, 0.15)  # of BACKGROUNDS, in that order
    level_dbfs: tuple[float, float] = (-80.0, -45.0)  # RMS of white, room and fan backgrounds
    below_peak_db: float = 20.0  # a background stays at least this far under the speech's peak
    dc_offset: tuple[float, float] = (0.002, 0.03)  # of full scale

    def __post_init__(self) -> None:
        if not 0.0 <= self.share <= 1.0:
            raise ValueError(f"LiveRanges.share ({self.share}) must be in [0, 1].")
        if len(self.weights) != len(BACKGROUNDS) or min(self.weights) < 0 or sum(self.weights) <= 0:
            raise ValueError(f"LiveRanges.weights ({self.weights}) must be {len(BACKGROUNDS)} non-negative "
                             f"weights of {BACKGROUNDS}, not all zero.")
        for name in ("lead_in_s", "tail_s", "level_dbfs", "dc_offset"):
            low, high = getattr(self, name)
            if low > high:
                raise ValueError(f"LiveRanges.{name} range is empty: {low} > {high}")
        if self.lead_in_s[0] < 0 or self.tail_s[0] < 0:
            raise ValueError(f"lead_in_s {self.lead_in_s} and tail_s {self.tail_s} must be >= 0.")
        if self.level_dbfs[1] > 0:
            raise ValueError(f"level_dbfs {self.level_dbfs} must stay at or below 0 dBFS.")


@dataclass(frozen=True)
class LiveSetting:
    """The draw for one utterance: what :func:`apply_live` does."""

    lead_in_s: float
    tail_s: float
    background: str
    level_dbfs: float  # RMS of the background (dc: the offset's level)
    seed: int  # of the background's noise

    def describe(self) -> str:
        """A short tag for the manifest, e.g. 'live=room@-52,lead=1.3,tail=0.4'."""
        return f"live={self.background}@{self.level_dbfs:.0f},lead={self.lead_in_s:.1f},tail={self.tail_s:.1f}"


def draw_live(rng: np.random.Generator, ranges: LiveRanges) -> LiveSetting | None:
    """One utterance's live setting, or None for the utterances left as they are. Fixed draw order."""
    chosen = rng.random() < ranges.share
    lead, tail = rng.uniform(*ranges.lead_in_s), rng.uniform(*ranges.tail_s)
    weights = np.asarray(ranges.weights, dtype=np.float64)
    kind = BACKGROUNDS[int(rng.choice(len(BACKGROUNDS), p=weights / weights.sum()))]
    level = rng.uniform(*ranges.level_dbfs)
    if kind == "dc":
        level = 20.0 * np.log10(rng.uniform(*ranges.dc_offset))
    seed = int(rng.integers(2**31))
    return LiveSetting(float(lead), float(tail), kind, float(level), seed) if chosen else None


def background(kind: str, n: int, level_dbfs: float, rng: np.random.Generator) -> np.ndarray:
    """(n,) float32 background of ``kind`` (one of :data:`BACKGROUNDS`) at ``level_dbfs`` RMS (module docstring).

    For ``dc`` the level is the offset's (20 log10 of its value); ``zeros`` ignores it.
    """
    if kind not in BACKGROUNDS:
        raise ValueError(f"unknown background {kind!r}; valid: {list(BACKGROUNDS)}")
    gain = 10.0 ** (level_dbfs / 20.0)
    t = np.arange(n) / SAMPLE_RATE
    if kind == "zeros":
        return np.zeros(n, np.float32)
    if kind == "white":
        return (gain * rng.standard_normal(n)).astype(np.float32)
    if kind == "dc":
        floor = 10.0 ** (DC_FLOOR_DBFS / 20.0) * rng.standard_normal(n)
        return (gain + floor).astype(np.float32)
    if kind == "room":
        mains = 50.0 if rng.random() < 0.5 else 60.0
        phases = rng.uniform(0, 2 * np.pi, HUM_HARMONICS)
        hum = sum(0.5**k * np.sin(2 * np.pi * mains * (k + 1) * t + phases[k]) for k in range(HUM_HARMONICS))
        hum = hum / max(float(np.sqrt(np.mean(hum**2))), 1e-12)
        pink = coloured_noise(n, "pink", rng) * 10.0 ** (-5.0 / 20.0)
        mix = hum + pink
        return (gain * mix / max(float(np.sqrt(np.mean(mix**2))), 1e-12)).astype(np.float32)
    # fan: white noise band-limited in the frequency domain, its level swelling at 0.1-0.5 Hz by +-3 dB
    spectrum = np.fft.rfft(rng.standard_normal(n))
    freqs = np.fft.rfftfreq(n, d=1.0 / SAMPLE_RATE)
    spectrum[(freqs < FAN_BAND_HZ[0]) | (freqs > FAN_BAND_HZ[1])] = 0.0
    band = np.fft.irfft(spectrum, n)
    band = band / max(float(np.sqrt(np.mean(band**2))), 1e-12)
    swell = 10.0 ** (3.0 * np.sin(2 * np.pi * rng.uniform(0.1, 0.5) * t + rng.uniform(0, 2 * np.pi)) / 20.0)
    shaped = band * swell
    return (gain * shaped / max(float(np.sqrt(np.mean(shaped**2))), 1e-12)).astype(np.float32)


def apply_live(audio: np.ndarray, setting: LiveSetting, below_peak_db: float = 20.0) -> np.ndarray:
    """(n,) float32 speech -> (lead + n + tail,) float32 with the setting's background under it all.

    A noise background is lowered when needed so that it stays ``below_peak_db`` under the
    speech's peak (a quiet recording keeps a quieter room); the speech samples are unchanged.
    """
    lead, tail = round(setting.lead_in_s * SAMPLE_RATE), round(setting.tail_s * SAMPLE_RATE)
    out = np.concatenate([np.zeros(lead, np.float32), audio.astype(np.float32), np.zeros(tail, np.float32)])
    level = setting.level_dbfs
    if setting.background in ("white", "room", "fan"):
        peak_dbfs = 20.0 * np.log10(max(float(np.max(np.abs(audio))), 1e-6))
        level = min(level, peak_dbfs - below_peak_db)
    out += background(setting.background, out.size, level, np.random.default_rng(setting.seed))
    return np.clip(out, -1.0, 1.0)
