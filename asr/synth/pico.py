"""A second training synthesizer: SVOX Pico (PyPI ``ttspico``), with speakers made by resampling.

Why a second engine: a model trained on eSpeak NG alone learns eSpeak's rule-built phones
(flat formant targets, sharp harmonics up to 8 kHz) and hears nothing in speech made any
other way: about 100% WER on flite reading the test sentences, and no eSpeak-only change
measured so far moved that below 96%. Pico's two English voices (en-US, en-GB) are
statistical-parametric, trained on recordings, so their formant movements and spectra are
those of a human speaker. The ``ttspico`` sdist carries the voice files and builds with a C
compiler: pip-only and offline, like eSpeak. Never flite or festival: those are what the
``xengine`` split measures.

Pico has two speakers, both women. More speakers come from resampling: audio at 16 kHz
resampled to ``16000 / formant_scale`` Hz and read back at 16 kHz has every frequency
(formants and pitch) times ``formant_scale`` and lasts ``1 / formant_scale`` as long: a
vocal tract about 20% longer at 0.8. Pico's own pitch and rate settings (percent of its
default) are drawn with it, so pitch and speed do not follow the formants.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from asr.extras import require
from asr.synth.formants import draw_scale_rate, scale_frequencies
from asr.data.features import SAMPLE_RATE

PICO_LANGUAGES = ("en-US", "en-GB")
FORMANT_SCALE_RANGE = (0.78, 1.05)  # 0.78: a man's vocal tract from a woman's; 1.05: a shorter one
PITCH_PERCENT_RANGE = (55, 135)  # Pico's pitch parameter (its 100 = the voice's own, about 200 Hz)
RATE_PERCENT_RANGE = (75, 125)  # Pico's speed parameter (100 = its default)
VOLUME_PERCENT = 50  # Pico's default (100) clips on loud vowels; at 50 the peaks stay near -6 dBFS


@dataclass(frozen=True)
class PicoVoice:
    """One Pico speaker: a language voice, its pitch and rate settings and the formant scale."""

    language: str  # "en-US" or "en-GB"
    pitch: int  # Pico percent
    rate: int  # Pico percent
    resample_hz: int  # the audio is resampled to this and read back at 16 kHz

    @property
    def formant_scale(self) -> float:
        return SAMPLE_RATE / self.resample_hz

    @property
    def name(self) -> str:
        """The speaker label, e.g. ``pico-en-US@0.85``: the voice and the formant scale."""
        return f"pico-{self.language}@{self.formant_scale:.2f}"


def draw_pico_voice(rng: random.Random) -> PicoVoice:
    """A Pico speaker drawn from the ranges above (three draws from ``rng`` and one choice)."""
    language = rng.choice(PICO_LANGUAGES)
    resample_hz = draw_scale_rate(rng, FORMANT_SCALE_RANGE)
    return PicoVoice(language, rng.randint(*PITCH_PERCENT_RANGE), rng.randint(*RATE_PERCENT_RANGE), resample_hz)


class PicoSynthesizer:
    """text + :class:`PicoVoice` -> (n,) int16 at 16 kHz, the same samples for the same arguments.

    Pico's output depends on what the engine said before (its excitation state carries over:
    the same sentence twice differs in most samples), so every utterance gets a fresh engine
    (~8 ms). ttspico frees about 70 KB less than an engine takes; the synth pool recycles its
    workers (``asr.synth.corpus.WORKER_MAX_TASKS``) so a long build does not grow without bound.
    """

    def __init__(self) -> None:
        # ttspico builds from source: the extra needs a C compiler
        self._engine_class = require("ttspico", "synth", "SVOX Pico (the synth corpus's pico voices)").TtsEngine

    def synthesize(self, text: str, voice: PicoVoice) -> np.ndarray:
        if voice.language not in PICO_LANGUAGES:
            raise ValueError(f"no Pico voice {voice.language!r}; valid: {PICO_LANGUAGES}")
        engine = self._engine_class(voice.language)
        engine.volume = VOLUME_PERCENT
        engine.pitch = voice.pitch
        engine.rate = voice.rate
        pcm = engine.speak(text)
        if not pcm:
            return np.zeros(0, dtype=np.int16)
        # Pico writes 16 kHz int16
        return scale_frequencies(np.frombuffer(pcm, dtype=np.int16), voice.resample_hz)
