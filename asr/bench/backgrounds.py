"""The robustness benchmark's backgrounds: made apart from every training generator.

A model trained on ``asr.synth.conditions``' noise, babble and rooms and judged on the same
generators tells how well it learned those generators, not how it hears a room. So nothing
here calls them:

* ``babble``: ``BABBLE_TALKERS`` distant talkers, each a flite voice (another engine than any
  training voice: training reads eSpeak, SVOX Pico and the neural voices) reading
  :data:`BABBLE_SENTENCES`, sentences written for this benchmark that no corpus split draws
  (the corpus draws from ``asr.synth.sentences``' grammar); flite is for evaluation only;
* ``music``: :func:`music`: notes of a pentatonic melody and a bass line with harmonics and
  decaying envelopes, chords and a drum kit at a drawn tempo (the training generators make no
  tonal signal at all);
* ``white``: uniform (not Gaussian) samples; ``pink``: white filtered by a fixed 3-pole IIR
  pinking filter (the training generator shapes a Gaussian spectrum by FFT);
* ``reverb``: :func:`room_impulse`: a shoebox room's image sources (early reflections at their
  geometric delays) and a diffuse tail whose high band decays faster than its low band (the
  training rooms are one exponentially decaying white tail).

Additive backgrounds are drawn at unit RMS and placed at an SNR by :func:`at_snr`, against the
speech's active power (:func:`speech_power`: over the frames within ``SPEECH_RANGE_DB`` of the
loudest). Audio is float64 (n,) at ``SAMPLE_RATE``; every draw comes from the Generator given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache

import numpy as np
from scipy.signal import lfilter

from asr.bench.live_sessions import speech_bounds
from asr.data.features import SAMPLE_RATE

ADDITIVE_KINDS = ("babble", "music", "white", "pink")
KINDS = (*ADDITIVE_KINDS, "reverb")
BABBLE_TALKERS = 3
BABBLE_VOICES = ("slt", "kal16", "rms", "awb")
BABBLE_GAP_S = (0.2, 0.8)
# Written for the benchmark: none of them is a sentence of the corpus's grammar.
BABBLE_SENTENCES = (
    "the weather tonight turns colder with light snow over the northern hills",
    "and now back to the studio where our guests are waiting to talk about the match",
    "she said the train was late again so everyone waited on the platform",
    "prices at the market rose a little this week after the long dry summer",
    "he opened the window and listened to the traffic in the street below",
    "our next caller has a question about the garden and the roses",
    "the museum will stay open late on friday for the new exhibition",
    "they planted apple trees along the river when the village was young",
    "please remember to bring your tickets and arrive ten minutes early",
    "the team scored twice in the second half and the crowd went wild",
    "a small boat drifted past the harbour lights just before midnight",
    "we asked the baker for two loaves and a box of cinnamon rolls",
    "the library has moved its children's books to the upper floor",
    "after the storm the whole street was covered in leaves and branches",
    "my uncle used to repair old clocks in a workshop behind the house",
    "the concert was cancelled because the singer had lost her voice",
)
SOUND_SPEED_M_S = 343.0
MIC_DISTANCE_M = (0.5, 1.5)
WALL_CLEARANCE_M = 0.3
PINK_B = (0.049922035, -0.095993537, 0.050612699, -0.004408786)  # a 3-pole fit to 1/f power, -10 dB/decade
PINK_A = (1.0, -2.494956002, 2.017265875, -0.522189400)
PENTATONIC = (0, 2, 4, 7, 9)  # semitones above the key's root


def unit_rms(x: np.ndarray) -> np.ndarray:
    """(n,) ``x`` scaled to RMS 1 (silence stays silence)."""
    rms = float(np.sqrt(np.mean(np.square(x, dtype=np.float64)))) if x.size else 0.0
    return x / rms if rms > 0 else x.astype(np.float64)


def speech_power(audio: np.ndarray) -> float:
    """Mean power of a sentence's (n,) audio over its speech (``live_sessions.speech_bounds``)."""
    onset, end = speech_bounds(audio)
    return float(np.mean(np.square(audio[onset:end], dtype=np.float64)))


def at_snr(background: np.ndarray, power: float, snr_db: float) -> np.ndarray:
    """(n,) ``background`` scaled so that ``power`` (the speech's) over its own power is ``snr_db``."""
    noise_power = float(np.mean(np.square(background, dtype=np.float64)))
    if noise_power <= 0:
        raise ValueError("a silent background has no SNR")
    return background * np.sqrt(power / (noise_power * 10.0 ** (snr_db / 10.0)))


def white(n: int, rng: np.random.Generator) -> np.ndarray:
    """(n,) unit-RMS white noise with uniform samples."""
    return unit_rms(rng.uniform(-1.0, 1.0, n))


def pink(n: int, rng: np.random.Generator) -> np.ndarray:
    """(n,) unit-RMS pink noise: uniform white through the IIR pinking filter (its first 0.5 s of
    settling is drawn and dropped)."""
    settle = SAMPLE_RATE // 2
    out = lfilter(PINK_B, PINK_A, rng.uniform(-1.0, 1.0, n + settle))[settle:]
    return unit_rms(out - out.mean())


def _tone(freq: float, seconds: float, harmonics: int, decay_s: float, rng: np.random.Generator) -> np.ndarray:
    """A plucked note: ``harmonics`` partials falling 1/k, a 5 ms attack, an exponential decay."""
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    partials = sum(np.sin(2 * np.pi * freq * k * t + rng.uniform(0, 2 * np.pi)) / k
                   for k in range(1, harmonics + 1) if freq * k < SAMPLE_RATE / 2)
    envelope = np.minimum(t / 0.005, 1.0) * np.exp(-t / decay_s)
    return partials * envelope


def _kick(rng: np.random.Generator) -> np.ndarray:
    t = np.arange(int(0.25 * SAMPLE_RATE)) / SAMPLE_RATE
    sweep = 2 * np.pi * (50 * t + 60 * 0.04 * (1 - np.exp(-t / 0.04)))  # 110 Hz falling to 50 Hz
    return np.sin(sweep + rng.uniform(0, 0.1)) * np.exp(-t / 0.08)


def _hat(rng: np.random.Generator) -> np.ndarray:
    n = int(0.06 * SAMPLE_RATE)
    burst = np.diff(rng.standard_normal(n + 1))  # differenced: the energy moves up to the high band
    return 0.3 * burst * np.exp(-np.arange(n) / (0.012 * SAMPLE_RATE))


def _add(out: np.ndarray, at: int, piece: np.ndarray) -> None:
    end = min(out.size, at + piece.size)
    if at < end:
        out[at:end] += piece[: end - at]


def music(n: int, rng: np.random.Generator) -> np.ndarray:
    """(n,) unit-RMS music: a melody, a bass line and chords over a drum kit at 80-140 beats a minute."""
    beat = 60.0 / rng.uniform(80.0, 140.0)
    root = 110.0 * 2 ** (rng.integers(0, 12) / 12)  # the key: A2 to G#3
    melody, bass, drums = np.zeros(n), np.zeros(n), np.zeros(n)
    t = 0.0
    while t * SAMPLE_RATE < n:
        at = int(t * SAMPLE_RATE)
        length = beat * float(rng.choice([0.5, 1.0, 1.0, 2.0]))
        degree = int(rng.integers(0, len(PENTATONIC)))
        octave = int(rng.integers(2, 4))
        _add(melody, at, _tone(root * 2 ** (octave + PENTATONIC[degree] / 12), length + 0.3, 6, 0.4 * length, rng))
        t += length
    for k in range(int(n / (beat * SAMPLE_RATE)) + 1):
        at = int(k * beat * SAMPLE_RATE)
        if k % 4 == 0:
            chord = root * 2 ** (1 + np.array(PENTATONIC)[rng.choice(len(PENTATONIC), 3, replace=False)] / 12)
            for f in chord:
                _add(melody, at, 0.3 * _tone(f, 4 * beat, 4, 2 * beat, rng))
        if k % 2 == 0:
            _add(bass, at, _tone(root * 2 ** (PENTATONIC[int(rng.integers(0, 3))] / 12), 2 * beat, 3, beat, rng))
            _add(drums, at, _kick(rng))
        _add(drums, at + int(beat * SAMPLE_RATE / 2), _hat(rng))
    return unit_rms(unit_rms(melody) + 0.7 * unit_rms(bass) + 0.5 * unit_rms(drums))


def room_impulse(rt60_s: float, rng: np.random.Generator, max_order: int = 6) -> np.ndarray:
    """(m,) a shoebox room's impulse response with reverberation time ``rt60_s``, direct path 1.0 at sample 0.

    The room (3-8 x 3-6 x 2.4-3.5 m), the talker and the microphone (``MIC_DISTANCE_M`` apart) are drawn; the
    walls' reflection coefficient follows from Sabine's formula for ``rt60_s``. Image sources up
    to ``max_order`` cells away give the early reflections at their delays, gains 1/distance; past
    the time the nearest wall's ``max_order``-th image arrives, a diffuse tail of noise decays at
    ``rt60_s`` below 2 kHz and at ``0.6 * rt60_s`` above (walls and air absorb highs faster),
    joined at the level the images reach there.
    """
    if not 0.05 <= rt60_s <= 3.0:
        raise ValueError(f"rt60_s ({rt60_s}) must lie in [0.05, 3] s")
    room = np.array([rng.uniform(3, 8), rng.uniform(3, 6), rng.uniform(2.4, 3.5)])
    while True:  # a talker MIC_DISTANCE_M from the microphone (a desk or a laptop), both off the walls
        src = room * rng.uniform(0.15, 0.85, 3)
        direction = rng.standard_normal(3)
        mic = src + rng.uniform(*MIC_DISTANCE_M) * direction / np.linalg.norm(direction)
        if np.all((mic > WALL_CLEARANCE_M) & (mic < room - WALL_CLEARANCE_M)):
            break
    direct = float(np.linalg.norm(src - mic))
    volume = float(np.prod(room))
    surface = 2 * float(room[0] * room[1] + room[0] * room[2] + room[1] * room[2])
    absorption = min(0.161 * volume / (surface * rt60_s), 0.99)  # Sabine: the walls' mean absorption
    beta = np.sqrt(1.0 - absorption)  # pressure reflection coefficient of every wall
    length = int(min(1.2 * rt60_s + 0.05, 2.0) * SAMPLE_RATE)
    ir = np.zeros(length)
    orders = np.arange(-max_order, max_order + 1)
    cells = np.stack(np.meshgrid(orders, orders, orders, indexing="ij"), axis=-1).reshape(-1, 3)  # (K, 3)
    for parity in np.ndindex(2, 2, 2):  # per axis: the source itself (0) or mirrored in the wall at 0 (1)
        p = np.array(parity)
        images = (1 - 2 * p)[None, :] * src[None, :] + 2 * cells * room[None, :]  # (K, 3)
        bounces = (np.abs(cells - p[None, :]) + np.abs(cells)).sum(axis=1)  # (K,)
        d = np.linalg.norm(images - mic[None, :], axis=1)
        delay = np.round((d - direct) / SOUND_SPEED_M_S * SAMPLE_RATE).astype(int)
        keep = (delay < length) & (bounces > 0)
        np.add.at(ir, delay[keep], (beta ** bounces[keep]) * direct / d[keep])
    tail_start = int(max_order * float(room.min()) / SOUND_SPEED_M_S * SAMPLE_RATE)
    if tail_start < length:
        t = np.arange(length - tail_start) / SAMPLE_RATE
        freqs = np.fft.rfftfreq(t.size, 1.0 / SAMPLE_RATE)
        bands = []
        for high, decay_s in ((False, rt60_s), (True, 0.6 * rt60_s)):
            spectrum = np.fft.rfft(rng.standard_normal(t.size))
            spectrum[(freqs > 2000.0) != high] = 0.0
            bands.append(np.fft.irfft(spectrum, t.size) * np.exp(-6.9078 * t / decay_s))  # -60 dB at decay_s
        tail = bands[0] + bands[1]
        join = SAMPLE_RATE // 50  # 20 ms either side of the join
        before = ir[max(1, tail_start - join) : tail_start]
        level = float(np.sqrt(np.mean(before**2))) if before.size else 0.0
        ir[tail_start:] += tail * level / max(float(np.sqrt(np.mean(tail[:join] ** 2))), 1e-12)
    ir[0] = 1.0
    return ir


def reverberate(audio: np.ndarray, ir: np.ndarray) -> np.ndarray:
    """(n,) ``audio`` through the room ``ir`` (m,): the first n samples of the convolution, rescaled to the
    input's speech power (a room changes what reaches the microphone, not how loud the talker is)."""
    size = audio.size + ir.size - 1
    nfft = 1 << (size - 1).bit_length()
    wet = np.fft.irfft(np.fft.rfft(audio, nfft) * np.fft.rfft(ir, nfft), nfft)[: audio.size]
    return wet * np.sqrt(speech_power(audio) / max(speech_power(wet), 1e-30))


def babble(n: int, talkers: Sequence[Sequence[np.ndarray]], rng: np.random.Generator) -> np.ndarray:
    """(n,) unit-RMS babble: each talker's sentences (float arrays) in a drawn order with drawn gaps,
    from a drawn point, looped to n samples, at equal RMS, summed."""
    if not talkers or any(len(t) == 0 for t in talkers):
        raise ValueError("babble needs at least one talker with at least one sentence")
    out = np.zeros(n)
    for sentences in talkers:
        pieces: list[np.ndarray] = []
        total = 0
        while total < n + SAMPLE_RATE * 10:
            for k in rng.permutation(len(sentences)):
                gap = np.zeros(int(rng.uniform(*BABBLE_GAP_S) * SAMPLE_RATE))
                pieces += [np.asarray(sentences[k], dtype=np.float64), gap]
                total += len(sentences[k]) + gap.size
        stream = np.concatenate(pieces)
        start = int(rng.integers(0, stream.size - n))
        out += unit_rms(stream[start : start + n])
    return unit_rms(out)


@lru_cache(maxsize=1)
def flite_talkers(voices: tuple[str, ...] = BABBLE_VOICES) -> tuple[tuple[np.ndarray, ...], ...]:
    """Per flite voice of ``voices`` that this flite has, :data:`BABBLE_SENTENCES` read by it (float64 in
    [-1, 1]); RuntimeError when flite or the voices are missing."""
    from asr.synth.xengine import INSTALL_HINT, flite_path, flite_voices, render_flite

    flite = flite_path()
    if flite is None:
        raise RuntimeError(f"babble needs flite: {INSTALL_HINT}")
    have = [v for v in voices if v in flite_voices(flite)]
    if len(have) < BABBLE_TALKERS:
        raise RuntimeError(f"babble needs {BABBLE_TALKERS} flite voices of {voices}; this flite has {have}")
    return tuple(tuple(render_flite(text, voice, flite).astype(np.float64) / 32768.0 for text in BABBLE_SENTENCES)
                 for voice in have)


def additive(kind: str, n: int, rng: np.random.Generator,
             talkers: Callable[[], Sequence[Sequence[np.ndarray]]] = flite_talkers) -> np.ndarray:
    """(n,) unit-RMS background of ``kind`` (one of :data:`ADDITIVE_KINDS`). Babble draws
    ``BABBLE_TALKERS`` of the voices ``talkers()`` gives."""
    if kind not in ADDITIVE_KINDS:
        raise ValueError(f"unknown additive background {kind!r}; valid: {', '.join(ADDITIVE_KINDS)}")
    if kind == "white":
        return white(n, rng)
    if kind == "pink":
        return pink(n, rng)
    if kind == "music":
        return music(n, rng)
    voices = talkers()
    chosen = rng.choice(len(voices), size=min(BABBLE_TALKERS, len(voices)), replace=False)
    return babble(n, [voices[i] for i in chosen], rng)
