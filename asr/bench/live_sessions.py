"""Live sessions for the live benchmark: a split's sentences with pauses, over a background.

A session is what a microphone sends: a lead-in before the speaker starts, several
sentences separated by pauses, a tail, and a background that runs under all of it (the
sentences are added to it, never spliced in). Every session is laid out once
(:func:`plan_sessions`) and rendered over each background (:func:`render`), so the
backgrounds are compared on the same sentences, pauses and lengths.

The reference for each sentence (:func:`alone`) is that sentence alone on a fresh
connection: the same background samples that lie under it in the session, from
``ALONE_LEAD_S`` before its audio to ``ALONE_TAIL_S`` after it, with no other sentence.
The short lead gives the stream a moment of the room before the speech, as a user who
presses a button and then speaks; the tail lets the last chunk carry the last word.

Levels are RMS in dBFS against full scale 1.0 (a full-scale square wave), as the lead-in
probe's and ``features.noise_floor_dbfs``. Backgrounds (:data:`BACKGROUNDS`):

* ``zeros``: exact digital silence;
* ``white-90``, ``white-70``, ``white-50``: a white floor at that level;
* ``room``: room tone: mains hum (50 Hz and its harmonics to 300 Hz, amplitude 1/k) at
  ``HUM_DBFS`` and pink noise at ``ROOM_NOISE_DBFS``;
* ``fan``: a fan: noise band-limited to ``FAN_BAND_HZ`` at ``FAN_DBFS``;
* ``dc``: a DC offset of ``DC_OFFSET`` over the -70 dBFS white floor (so against
  ``white-70`` it shows what the offset alone costs).

Speech bounds (:func:`speech_bounds`) are measured on each sentence's own audio, before
the background: synthesized audio carries some silence of its own around the speech.

Audio is float64 (n,) at ``SAMPLE_RATE``; times in samples unless named ``_s``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from asr.data.features import SAMPLE_RATE
from asr.synth.conditions import coloured_noise

BACKGROUNDS = ("zeros", "white-90", "white-70", "white-50", "room", "fan", "dc")
WHITE_DBFS = {"white-90": -90.0, "white-70": -70.0, "white-50": -50.0}
HUM_HZ, HUM_HARMONICS, HUM_DBFS = 50.0, 6, -55.0
ROOM_NOISE_DBFS = -60.0
FAN_BAND_HZ, FAN_DBFS = (100.0, 1000.0), -50.0
DC_OFFSET, DC_FLOOR_DBFS = 0.01, -70.0
ALONE_LEAD_S, ALONE_TAIL_S = 0.3, 0.5
SPEECH_FRAME_S, SPEECH_RANGE_DB = 0.01, 40.0
_PAD = int(max(ALONE_LEAD_S, ALONE_TAIL_S) * SAMPLE_RATE)  # background beyond each end of a session, for alone()


def check_backgrounds(names) -> tuple[str, ...]:
    """``names`` as a tuple, each one of :data:`BACKGROUNDS` (ValueError names the bad ones)."""
    names = tuple(names)
    bad = [n for n in names if n not in BACKGROUNDS]
    if bad or not names:
        raise ValueError(f"unknown background(s) {bad or names!r}; valid: {', '.join(BACKGROUNDS)}")
    return names


def rms_dbfs(x: np.ndarray) -> float:
    """RMS level of (n,) samples in dBFS (-inf for silence)."""
    rms = float(np.sqrt(np.mean(np.square(x, dtype=np.float64))))
    return 20.0 * np.log10(rms) if rms > 0 else float("-inf")


def _at(x: np.ndarray, dbfs: float) -> np.ndarray:
    """(n,) ``x`` scaled to an RMS of ``dbfs``."""
    return x * (10.0 ** (dbfs / 20.0) / max(float(np.sqrt(np.mean(x**2))), 1e-30))


def _white(n: int, dbfs: float, rng: np.random.Generator) -> np.ndarray:
    return _at(rng.standard_normal(n), dbfs)


def _hum(n: int, rng: np.random.Generator) -> np.ndarray:
    t = np.arange(n) / SAMPLE_RATE
    phases = rng.uniform(0.0, 2 * np.pi, HUM_HARMONICS)
    hum = sum(np.sin(2 * np.pi * HUM_HZ * k * t + phases[k - 1]) / k for k in range(1, HUM_HARMONICS + 1))
    return _at(hum, HUM_DBFS)


def _band(n: int, band_hz: tuple[float, float], rng: np.random.Generator) -> np.ndarray:
    spectrum = np.fft.rfft(rng.standard_normal(n))
    freqs = np.fft.rfftfreq(n, d=1.0 / SAMPLE_RATE)
    spectrum[(freqs < band_hz[0]) | (freqs > band_hz[1])] = 0.0
    return np.fft.irfft(spectrum, n)


def background(name: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """(n,) float64 samples of background ``name`` (one of :data:`BACKGROUNDS`), drawn from ``rng``."""
    check_backgrounds([name])
    if n < 1:
        raise ValueError(f"a background needs n >= 1 samples, got {n}")
    if name == "zeros":
        return np.zeros(n)
    if name in WHITE_DBFS:
        return _white(n, WHITE_DBFS[name], rng)
    if name == "room":
        return _hum(n, rng) + _at(coloured_noise(n, "pink", rng).astype(np.float64), ROOM_NOISE_DBFS)
    if name == "fan":
        return _at(_band(n, FAN_BAND_HZ, rng), FAN_DBFS)
    return DC_OFFSET + _white(n, DC_FLOOR_DBFS, rng)  # dc


def speech_bounds(audio: np.ndarray) -> tuple[int, int]:
    """(onset, end) samples of the speech in a sentence's own (n,) audio: the first and last
    ``SPEECH_FRAME_S`` frame within ``SPEECH_RANGE_DB`` of its loudest frame."""
    hop = int(SPEECH_FRAME_S * SAMPLE_RATE)
    frames = len(audio) // hop
    if frames == 0:
        raise ValueError(f"audio of {len(audio)} samples is shorter than one {hop}-sample frame")
    energy = np.mean(np.square(audio[: frames * hop].reshape(frames, hop), dtype=np.float64), axis=1)
    if energy.max() <= 0:
        raise ValueError("audio is silent: no speech to bound")
    loud = np.flatnonzero(energy >= energy.max() * 10.0 ** (-SPEECH_RANGE_DB / 10.0))
    return int(loud[0] * hop), int((loud[-1] + 1) * hop)


@dataclass(frozen=True, eq=False)
class Sentence:
    """One usable cut of the split: its id, reference text and (n,) audio (compared by identity)."""

    cut_id: str
    text: str
    audio: np.ndarray = field(repr=False)

    @property
    def bounds(self) -> tuple[int, int]:
        return speech_bounds(self.audio)


def load_sentences(cuts: str | Path, count: int, data_dir: str | Path | None = None) -> tuple[list[Sentence], Counter]:
    """The first ``count`` usable cuts of a manifest as sentences, and the skipped ones by reason
    (``asr.evaluation.split.usable_cuts``'s rules, plus ``silent_audio``)."""
    from asr.evaluation.split import usable_cuts

    skipped: Counter = Counter()
    out: list[Sentence] = []
    for cut, text, audio in usable_cuts(cuts, data_dir, None, skipped):
        samples = audio.double().numpy()
        if not np.any(samples):
            skipped["silent_audio"] += 1
            continue
        out.append(Sentence(cut.id, text, samples))
        if len(out) == count:
            break
    return out, skipped


@dataclass(frozen=True)
class Timing:
    """Ranges (seconds, drawn uniformly) of a session's lead-in, pauses and tail."""

    lead_in_s: tuple[float, float] = (0.0, 3.0)
    pause_s: tuple[float, float] = (0.3, 3.0)
    tail_s: tuple[float, float] = (0.5, 2.0)

    def __post_init__(self) -> None:
        for name in ("lead_in_s", "pause_s", "tail_s"):
            low, high = getattr(self, name)
            if not 0.0 <= low <= high:
                raise ValueError(f"{name} must be a range 0 <= low <= high, got {(low, high)}")


@dataclass(frozen=True)
class Placed:
    """A sentence in a session: its audio starts at sample ``start``; its speech spans ``speech``
    (session samples)."""

    sentence: Sentence
    start: int
    speech: tuple[int, int]

    @property
    def end(self) -> int:
        return self.start + len(self.sentence.audio)


@dataclass(frozen=True)
class SessionPlan:
    """One session's layout: sentences placed in ``samples`` samples of stream."""

    index: int
    placed: tuple[Placed, ...]
    samples: int


def plan_sessions(sentences: list[Sentence], sessions: int, per_session: int, seed: int,
                  timing: Timing = Timing()) -> list[SessionPlan]:
    """``sessions`` layouts of ``per_session`` sentences each, every sentence used once; the
    sentences are shuffled and the lead-ins, pauses and tails drawn from ``seed``."""
    if sessions < 1 or per_session < 1:
        raise ValueError(f"sessions ({sessions}) and sentences per session ({per_session}) must be >= 1")
    if len(sentences) < sessions * per_session:
        raise ValueError(f"{sessions} sessions of {per_session} sentences need {sessions * per_session} sentences; "
                         f"{len(sentences)} given")
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(sentences))[: sessions * per_session]

    def seconds(bounds: tuple[float, float]) -> int:
        return int(round(rng.uniform(*bounds) * SAMPLE_RATE))

    plans = []
    for index in range(sessions):
        cursor = seconds(timing.lead_in_s)
        placed = []
        for k in range(per_session):
            if k:
                cursor += seconds(timing.pause_s)
            sentence = sentences[order[index * per_session + k]]
            onset, end = sentence.bounds
            placed.append(Placed(sentence, cursor, (cursor + onset, cursor + end)))
            cursor += len(sentence.audio)
        plans.append(SessionPlan(index, tuple(placed), cursor + seconds(timing.tail_s)))
    return plans


def session_background(plan: SessionPlan, name: str, seed: int) -> np.ndarray:
    """(_PAD + plan.samples + _PAD,) the background under the session and beyond its ends; the same
    for the same plan, background and seed."""
    rng = np.random.default_rng([seed, plan.index, BACKGROUNDS.index(check_backgrounds([name])[0])])
    return background(name, plan.samples + 2 * _PAD, rng)


def render(plan: SessionPlan, bg: np.ndarray) -> np.ndarray:
    """(plan.samples,) the session: its background ``bg`` (:func:`session_background`) plus the sentences."""
    out = bg[_PAD : _PAD + plan.samples].copy()
    for p in plan.placed:
        out[p.start : p.end] += p.sentence.audio
    return out


def alone(placed: Placed, bg: np.ndarray) -> tuple[np.ndarray, tuple[int, int]]:
    """One sentence of a session alone: (the clip, its speech (onset, end) in clip samples). The clip is
    the session's background from ``ALONE_LEAD_S`` before the sentence's audio to ``ALONE_TAIL_S``
    after it, with only this sentence added."""
    lead, tail = int(ALONE_LEAD_S * SAMPLE_RATE), int(ALONE_TAIL_S * SAMPLE_RATE)
    clip = bg[_PAD + placed.start - lead : _PAD + placed.end + tail].copy()
    clip[lead : lead + len(placed.sentence.audio)] += placed.sentence.audio
    onset, end = placed.speech
    return clip, (onset - placed.start + lead, end - placed.start + lead)
