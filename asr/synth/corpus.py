"""The embedded `synth` corpus: English sentences spoken by eSpeak NG voices.

Determinism: every utterance is a pure function of (seed, split, index). Its
sentence, voice and eSpeak noise seed come from `sentence_rng`, and eSpeak starts
from pristine state for every sentence (see `asr.synth.espeak`). Utterances are accepted strictly in index order until a
split reaches its hours, so the pool size never changes the result.
"""

from __future__ import annotations

import dataclasses
import json
import math
import multiprocessing as mp
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import soundfile as sf
import torch
from lhotse import CutSet
from tqdm import tqdm

from asr.data.audio import float_to_int16, resample_int16
from asr.extras import require
from asr.synth.formants import draw_scale_rate, scale_frequencies
from asr.synth.utterance import UtteranceMeta, to_cut
from asr.synth.clean_copy import (CLEAN_MANIFEST, CLEAN_SPLIT, clean_copy_audio_path, clean_copy_id, fork_rng,
                                   start_clean_copies)
from asr.synth.capture import TRAIN_RANGES, CaptureRanges, apply_capture, draw_capture
from asr.synth.conditions import ConditionRanges, apply_conditions, draw_conditions
from asr.synth.live import LiveRanges, apply_live, draw_live
from asr.synth.espeak import EspeakSynthesizer
from asr.data.features import SAMPLE_RATE
from asr.data.manifest import write_cuts
from asr.synth.sentences import SentenceGenerator, sentence_rng
from asr.synth.passages import PassageRanges, is_passage, read_passage, with_noise_floor
from asr.synth.neural_tts import NeuralSynthesizer, NeuralVoice, draw_neural_voice
from asr.synth.pico import PicoSynthesizer, PicoVoice, draw_pico_voice
from asr.synth.voices import VoiceSetting, check_voices_exist, draw_voice

SPLITS = ("train", "dev", "test", "long")
# Synthesis workers are replaced after this many utterances: SVOX Pico leaks ~70 KB an
# utterance (asr.synth.pico); eSpeak and Pico start every utterance from fresh state, so
# which worker makes an utterance never changes it.
WORKER_MAX_TASKS = 2000
DURATION_BOUNDS = {"train": (1.0, 10.0), "dev": (1.0, 10.0), "test": (1.0, 10.0), "long": (20.0, 60.0)}
MAX_ATTEMPTS = 50
# Of the train utterances of the passage profile, this share are passages (asr.synth.passages).
PASSAGE_SHARE = 0.1


@dataclass(frozen=True)
class SynthProfile:
    """What a profile does to the train split. Dev, test and long are always clean, so the
    unseen-voice test measures the same thing under every profile."""

    varied_voices: bool  # VARIED_EXTRA_VARIANTS too, wider rate/pitch, intonation range, word gaps
    conditions: ConditionRanges | None  # rooms, noise, channel, level (asr.synth.conditions)
    # Silence before and after the sentence, each drawn from this range (seconds). eSpeak starts
    # speaking at the first sample and stops at the last; recordings and other engines do not, and
    # a model that never heard silence says "and" or "but" into it
    # (data/results/corpus_profiles.md, "Why the profile fields").
    edge_silence_s: tuple[float, float] | None = None
    # The "silence" is a white noise floor this many dB below the utterance's peak, under the
    # whole utterance. Digital zeros would not do: with no dither, a silent frame's log-mel is
    # log(float eps), far below speech, and zero padding drags the CMVN statistics until training
    # stalls (the same record). At the quiet end the int16 rounding still leaves mostly zeros, like
    # flite's quietest voice.
    noise_floor_db: tuple[float, float] = (-90.0, -45.0)
    # This share of the utterances is read by SVOX Pico instead of eSpeak (asr.synth.pico):
    # another engine's phones, with speakers made by formant scaling.
    pico_share: float = 0.0
    # This share is read by the neural voices (asr.synth.neural_tts: Hibari and Piper's joe, each
    # trained on a person's recordings), speakers again made by formant scaling.
    neural_share: float = 0.0
    neural_hibari_weight: float = 0.5  # of the neural share, Hibari's part (the rest: Piper's joe)
    # eSpeak's utterances get their formants (and pitch) scaled by a factor drawn from this range
    # (asr.synth.formants.scale_frequencies): eSpeak's variants differ mostly in pitch, and a model
    # trained on them falls apart when the formants of its test voices move (the same record).
    espeak_formant_scale: tuple[float, float] | None = None
    # This share of the train utterances are passages: 2-5 sentences by one voice with pauses
    # (asr.synth.passages); the rest stay single sentences.
    passages: PassageRanges | None = None
    # This share of the utterances goes through one capture path drawn from ``capture``
    # (asr.synth.capture: resampling with and without anti-aliasing, gain control, noise
    # suppression, telephone, codecs, clipping), after the acoustic conditions: what a browser,
    # a phone or a codec does to speech. TRAIN_RANGES draws other parameters than the capture
    # evaluation split.
    capture: CaptureRanges | None = None
    capture_share: float = 0.0
    # This share of the utterances gets a live microphone's surroundings (asr.synth.live): seconds
    # of silence, hum, fan noise or DC before and after the speech, a background under it all.
    live: LiveRanges | None = None
    # Every train utterance is written twice from one synthesis (asr.synth.clean_copy): as the profile
    # makes it, and clean: without edge silence, conditions and live surroundings (the capture path kept).
    clean_copy: bool = False

    def __post_init__(self):
        # One uniform picks the engine ([0, pico) Pico, [pico, pico + neural) neural, else eSpeak):
        # shares outside [0, 1] or summing past 1 would silently starve an engine.
        if not (0.0 <= self.pico_share <= 1.0 and 0.0 <= self.neural_share <= 1.0
                and self.pico_share + self.neural_share <= 1.0):
            raise ValueError(f"pico_share ({self.pico_share}) and neural_share ({self.neural_share}) must lie in "
                             f"[0, 1] and sum to at most 1 (the rest is eSpeak's)")
        if not 0.0 <= self.neural_hibari_weight <= 1.0:
            raise ValueError(f"neural_hibari_weight must lie in [0, 1], got {self.neural_hibari_weight}")
        if self.espeak_formant_scale is not None:
            low, high = self.espeak_formant_scale
            if not 0.0 < low <= high:
                raise ValueError(f"espeak_formant_scale must be (low, high) with 0 < low <= high, "
                                 f"got {self.espeak_formant_scale}")
        if not 0.0 <= self.capture_share <= 1.0 or (self.capture_share > 0.0) != (self.capture is not None):
            raise ValueError(f"capture_share ({self.capture_share}) must lie in [0, 1], and be > 0 exactly when "
                             f"capture ranges are given ({self.capture is not None})")
        if self.clean_copy and self.without_surroundings() == dataclasses.replace(self, clean_copy=False):
            raise ValueError("clean_copy needs surroundings to leave out (conditions, edge_silence_s or live): "
                             "without them the clean copy would be the train utterance again")

    @property
    def is_clean(self) -> bool:
        """eSpeak's output as it is: no wider voices, no conditions, no padding, no second engine."""
        return (not self.varied_voices and self.conditions is None and self.edge_silence_s is None
                and self.pico_share == 0.0 and self.neural_share == 0.0 and self.espeak_formant_scale is None
                and self.capture is None and self.passages is None and self.live is None)

    def without_surroundings(self) -> SynthProfile:
        """What this profile makes of a clean copy: no edge silence, conditions or live surroundings."""
        return dataclasses.replace(self, conditions=None, edge_silence_s=None, live=None, clean_copy=False)

    def for_split(self, split: str) -> SynthProfile:
        """The profile as it applies to ``split``: only train is changed; the evaluation splits stay clean."""
        return self if split == "train" else CLEAN_PROFILE


CLEAN_PROFILE = SynthProfile(varied_voices=False, conditions=None)
# pico_scaled with 35% of train read by the neural voices: eSpeak 50%, Pico 15%
NEURAL_PROFILE = SynthProfile(varied_voices=False, conditions=None, pico_share=0.15, neural_share=0.35,
                              espeak_formant_scale=(0.85, 1.15))
PROFILES = {
    "clean": CLEAN_PROFILE,  # eSpeak's output as it is
    "voices": SynthProfile(varied_voices=True, conditions=None),
    # eSpeak's voices as in clean, with silence and a noise floor at both ends
    "padded": SynthProfile(varied_voices=False, conditions=None, edge_silence_s=(0.05, 0.6)),
    # voices plus silence at both ends and a few conditions, kept light: most utterances stay
    # free of room and noise
    "mild": SynthProfile(varied_voices=True, conditions=ConditionRanges(
        reverb_prob=0.15, rt60_s=(0.1, 0.4), drr_db=(3.0, 15.0), noise_prob=0.2, snr_db=(15.0, 35.0),
        band_prob=0.2, telephone_share=0.25, lowpass_hz=(3500.0, 7500.0), eq_prob=0.5, eq_gain_db=(-6.0, 6.0),
        peak_dbfs=(-12.0, -1.0),
    ), edge_silence_s=(0.05, 0.6)),
    "varied": SynthProfile(varied_voices=True, conditions=ConditionRanges()),
    # eSpeak's voices as in clean for 60% of the utterances, SVOX Pico for the rest
    "pico": SynthProfile(varied_voices=False, conditions=None, pico_share=0.4),
    # pico, and eSpeak's formants scaled by 0.85-1.15 too
    "pico_scaled": SynthProfile(varied_voices=False, conditions=None, pico_share=0.4,
                                espeak_formant_scale=(0.85, 1.15)),
    "neural": NEURAL_PROFILE,
    # the neural voices read the majority: eSpeak 35%, Pico 10%, Hibari 38.5%, Piper 16.5%
    # (Hibari the larger part: it runs much cheaper than Piper, data/results/corpus_profiles.md)
    "neural_major": SynthProfile(varied_voices=False, conditions=None, pico_share=0.1, neural_share=0.55,
                                 neural_hibari_weight=0.7, espeak_formant_scale=(0.85, 1.15)),
    # neural with Hibari 80% of the neural share (eSpeak 50%, Pico 15%, Hibari 28%, Piper 7%): better on
    # flite than neural, a little worse on test, and faster to build (data/results/corpus_profiles.md)
    "neural_hibari": dataclasses.replace(NEURAL_PROFILE, neural_hibari_weight=0.8),
}
# neural_hibari with a share of train through the capture paths (asr.synth.capture.TRAIN_RANGES)
for _share in (0.3, 0.6):
    PROFILES[f"neural_hibari_capture{round(100 * _share)}"] = dataclasses.replace(
        PROFILES["neural_hibari"], capture=TRAIN_RANGES, capture_share=_share)
# neural_hibari and its capture30 with PASSAGE_SHARE of the train utterances read as passages (asr.synth.passages)
for _base in ("neural_hibari", "neural_hibari_capture30"):
    PROFILES[f"{_base}_passages"] = dataclasses.replace(PROFILES[_base], passages=PassageRanges(share=PASSAGE_SHARE))
# neural_hibari_capture30 with half of train made live: lead-ins, tails and backgrounds (asr.synth.live)
PROFILES["neural_hibari_capture30_live"] = dataclasses.replace(PROFILES["neural_hibari_capture30"], live=LiveRanges())
# Rooms for training (asr.synth.conditions' generators): reverberation, white/pink/brown noise,
# music-like tones and eSpeak babble of 1-5 talkers (one talker: a television) at 0-25 dB SNR, for
# most utterances; light channels (the capture paths do the rest). The robustness benchmark
# (asr.bench.robust) judges it with backgrounds of its own.
ROOM_RANGES = ConditionRanges(
    reverb_prob=0.35, rt60_s=(0.15, 0.9), drr_db=(-3.0, 12.0), noise_prob=0.6, snr_db=(0.0, 25.0),
    babble_share=0.4, babble_talkers=(1, 5), music_share=0.35, band_prob=0.1, eq_prob=0.3,
    eq_gain_db=(-6.0, 6.0), peak_dbfs=(-25.0, -1.0),
)
# neural_hibari_capture30 in rooms, with 0.05-0.6 s of silence over a noise floor at both ends. Not
# the live profile's seconds of lead-in or passages: from scratch, those kept CTC on its all-blank
# plateau (data/results/live_training.md).
PROFILES["neural_hibari_capture30_rooms"] = dataclasses.replace(
    PROFILES["neural_hibari_capture30"], conditions=ROOM_RANGES, edge_silence_s=(0.05, 0.6))
# The rooms profile's corpus with a clean copy of every train utterance (neural_hibari_capture30's, from
# the same synthesis) for a curriculum that starts clean: conf/experiment/quickstart_rooms.yaml.
PROFILES["neural_hibari_capture30_rooms_curriculum"] = dataclasses.replace(
    PROFILES["neural_hibari_capture30_rooms"], clean_copy=True)
# What scripts/prepare_data.py builds (and the quickstart expects) unless told. neural_hibari, not clean:
# a model of eSpeak alone hears eSpeak, not speech (~100% WER on flite), and the neural voices buy most
# of another engine for a few minutes of synthesis; capture30, because training on capture paths cuts
# the capture split's WER by more than half and costs the clean test split nothing with the LMs
# (data/results/corpus_profiles.md, capture.md). SynthConfig itself keeps "clean", the cheap one.
DEFAULT_PROFILE = "neural_hibari_capture30"


@dataclass(frozen=True)
class SynthConfig:
    out_dir: str
    seed: int = 0
    train_hours: float = 6.0
    dev_hours: float = 0.25
    test_hours: float = 0.25
    long_hours: float = 0.25
    workers: int = 2
    profile: str = "clean"

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise ValueError(f"unknown synth profile {self.profile!r}; valid: {list(PROFILES)}")

    def hours(self, split: str) -> float:
        return {"train": self.train_hours, "dev": self.dev_hours, "test": self.test_hours,
                "long": self.long_hours}[split]


# per-process worker state, set once by _init_worker (Pico on first use: most profiles never need it)
_SYNTH: EspeakSynthesizer | None = None
_GEN: SentenceGenerator | None = None
_PICO: PicoSynthesizer | None = None
_NEURAL: NeuralSynthesizer | None = None


class Made(NamedTuple):
    """One synthesized utterance: its (n,) int16 audio, the conditions described (None: none), and the
    clean copy a clean-copy profile makes of a train utterance."""

    text: str
    voice: object
    audio: np.ndarray
    conditions: str | None
    clean: Made | None = None


def _init_worker() -> None:
    global _SYNTH, _GEN
    torch.set_num_threads(1)
    _SYNTH = EspeakSynthesizer()
    _GEN = SentenceGenerator()


def _say(text: str, voice, rng) -> np.ndarray:
    raw = _SYNTH.synthesize(text, voice.voice, voice.rate, voice.pitch, seed=rng.randrange(1, 2**31),
                            pitch_span=voice.pitch_span, word_gap=voice.word_gap)
    return resample_int16(raw, _SYNTH.sample_rate, SAMPLE_RATE)


def _say_pico(text: str, voice: PicoVoice) -> np.ndarray:
    global _PICO
    if _PICO is None:
        _PICO = PicoSynthesizer()
    return _PICO.synthesize(text, voice)


def _say_neural(text: str, voice: NeuralVoice) -> np.ndarray:
    global _NEURAL
    if _NEURAL is None:
        _NEURAL = NeuralSynthesizer()
    return _NEURAL.synthesize(text, voice)


def _with_conditions(audio: np.ndarray, rng, split: str, ranges: ConditionRanges) -> tuple[np.ndarray, str]:
    """(n,) int16 -> (n,) int16 under drawn acoustic conditions, and their description.

    Babble is other sentences by other train voices, synthesized here: the corpus
    carries no noise files, and every draw stays a function of the utterance's seed.
    """
    cond = draw_conditions(np.random.default_rng(rng.getrandbits(63)), ranges)
    babble = None
    if cond.noise == "babble":
        babble = [_say(_GEN(rng), draw_voice(rng, split, varied=True), rng).astype(np.float32) / 32768.0
                  for _ in range(cond.babble_talkers)]
    out = apply_conditions(audio.astype(np.float32) / 32768.0, cond, babble)
    return float_to_int16(out), cond.describe()


def _with_capture(audio: np.ndarray, rng, profile: SynthProfile) -> tuple[np.ndarray, str | None]:
    """(n,) int16 -> (n,) int16 through a capture path for ``profile.capture_share`` of the utterances,
    and the path described (None: untouched)."""
    if rng.random() >= profile.capture_share:
        return audio, None
    capture = draw_capture(np.random.default_rng(rng.getrandbits(63)), profile.capture)
    return float_to_int16(apply_capture(audio.astype(np.float32) / 32768.0, capture)), capture.describe()


def _with_live(audio: np.ndarray, rng, ranges: LiveRanges) -> tuple[np.ndarray, str | None]:
    """(n,) int16 -> (lead + n + tail,) int16 with a live background for ``ranges.share`` of the utterances,
    and the setting described (None: untouched)."""
    setting = draw_live(np.random.default_rng(rng.getrandbits(63)), ranges)
    if setting is None:
        return audio, None
    lived = apply_live(audio.astype(np.float32) / 32768.0, setting, ranges.below_peak_db)
    return float_to_int16(lived), setting.describe()


def _pad_with_floor(audio: np.ndarray, rng, profile: SynthProfile, longest_s: float) -> np.ndarray:
    """(n,) int16 -> (lead + n + trail,) int16: silence at both ends, a noise floor under it all.

    The padding never takes the utterance past ``longest_s``.
    """
    room = max(0.0, longest_s - len(audio) / SAMPLE_RATE) / 2
    lead, trail = (min(rng.uniform(*profile.edge_silence_s), room) for _ in range(2))
    padded = np.concatenate([np.zeros(int(lead * SAMPLE_RATE), dtype=np.int16), audio,
                             np.zeros(int(trail * SAMPLE_RATE), dtype=np.int16)])
    return with_noise_floor(padded, rng, profile.noise_floor_db)


@dataclass
class Speaker:
    """One drawn voice of any engine and how it reads a sentence: ``say(text)`` -> (n,) int16 at SAMPLE_RATE.

    ``voice`` is the setting recorded in the manifest. eSpeak's formant scale (when the profile
    scales formants) is drawn right after the speaker's first sentence is synthesized: the draw
    order single-sentence corpora were built with, which keeps them reproducible.
    """

    voice: VoiceSetting
    engine: str  # "espeak", "pico" or "neural"
    rng: object
    engine_voice: object = None  # PicoVoice / NeuralVoice for those engines
    formant_scale: tuple[float, float] | None = None  # eSpeak only
    resample_hz: int | None = None

    def say(self, text: str) -> np.ndarray:
        if self.engine == "pico":
            return _say_pico(text, self.engine_voice)
        if self.engine == "neural":
            return _say_neural(text, self.engine_voice)
        audio = _say(text, self.voice, self.rng)
        if self.formant_scale is None:
            return audio
        if self.resample_hz is None:
            self.resample_hz = draw_scale_rate(self.rng, self.formant_scale)
            self.voice = dataclasses.replace(self.voice, voice=f"{self.voice.voice}@{SAMPLE_RATE / self.resample_hz:.2f}")
        return scale_frequencies(audio, self.resample_hz)


def draw_speaker(rng, split: str, profile: SynthProfile = CLEAN_PROFILE) -> Speaker:
    """The engine and voice of one utterance (single sentence or passage), drawn from ``rng``.

    The engine is drawn only by profiles with another engine, so the others' draws stay as
    they were; one uniform picks it: [0, pico) Pico, [pico, pico + neural) neural, else eSpeak.
    """
    engine_draw = rng.random() if profile.pico_share > 0 or profile.neural_share > 0 else 1.0
    if engine_draw < profile.pico_share:
        pico_voice = draw_pico_voice(rng)
        voice = VoiceSetting(voice=pico_voice.name, rate=pico_voice.rate, pitch=pico_voice.pitch)
        return Speaker(voice, "pico", rng, pico_voice)
    if engine_draw < profile.pico_share + profile.neural_share:
        neural_voice = draw_neural_voice(rng, profile.neural_hibari_weight)
        voice = VoiceSetting(voice=neural_voice.name, rate=round(neural_voice.speed * 100), pitch=100)
        return Speaker(voice, "neural", rng, neural_voice)
    return Speaker(draw_voice(rng, split, profile.varied_voices), "espeak", rng,
                   formant_scale=profile.espeak_formant_scale)


def _short_utterance(rng, split: str, profile: SynthProfile = CLEAN_PROFILE) -> Made | None:
    """One sentence as :class:`Made`, or None outside the split's durations.

    ``profile`` is applied as given: the caller passes ``profile.for_split(split)``.
    """
    low, high = DURATION_BOUNDS[split]
    text = _GEN(rng)
    speaker = draw_speaker(rng, split, profile)
    audio = speaker.say(text)
    if not low <= len(audio) / SAMPLE_RATE <= high:
        return None
    return _finish(audio, rng, split, profile, speaker.voice, text, high)


def _finish(audio: np.ndarray, rng, split: str, profile: SynthProfile, voice, text: str, longest_s: float) -> Made:
    """The profile's edge silence, acoustic conditions and capture path on a made utterance."""
    clean = None
    if profile.clean_copy:  # from a copy of the RNG: the draws below stay as they were
        clean = _finish(audio, fork_rng(rng), split, profile.without_surroundings(), voice, text, longest_s)
    if profile.edge_silence_s is not None:
        audio = _pad_with_floor(audio, rng, profile, longest_s)
    described = None
    if profile.conditions is not None:
        audio, described = _with_conditions(audio, rng, split, profile.conditions)
    if profile.capture is not None:  # drawn last: every other profile's draws stay as they were
        audio, captured = _with_capture(audio, rng, profile)
        described = ",".join(d for d in (described, captured) if d) or None
    if profile.live is not None:  # after the capture draw, for the same reason
        audio, lived = _with_live(audio, rng, profile.live)
        described = ",".join(d for d in (described, lived) if d) or None
    return Made(text, voice, audio, described, clean)


def join_sentences(rng, voice, low: float, high: float, target: float) -> tuple[str, np.ndarray] | None:
    """Sentences by one voice joined by short pauses until ``target`` s, never past ``high`` s.

    A sentence that would overshoot ``high`` is skipped and another drawn (at most
    200 draws); None when the passage stays shorter than ``low``.
    Returns (text, (n,) int16 audio at SAMPLE_RATE).
    """
    texts, pieces, total = [], [], 0
    for _ in range(200):
        text = _GEN(rng)
        audio = _say(text, voice, rng)
        # A pause is drawn before every sentence, the first too (unused there): the draw order
        # is part of what makes a corpus reproducible from its seed.
        pause = np.zeros(int(rng.uniform(0.15, 0.5) * SAMPLE_RATE), dtype=np.int16)
        if (total + len(pause) + len(audio)) / SAMPLE_RATE > high:
            continue
        texts.append(text)
        pieces += [pause, audio] if pieces else [audio]
        total += (len(pause) if len(pieces) > 1 else 0) + len(audio)
        if total / SAMPLE_RATE >= target:
            break
    if total / SAMPLE_RATE < low:
        return None
    return " ".join(texts), np.concatenate(pieces)


def _passage_utterance(rng, split: str, profile: SynthProfile) -> Made | None:
    """A train passage (asr.synth.passages) by one speaker of the profile's engines, then the profile's
    edge silence and conditions; None when the drawn sentences do not make one."""
    speaker = draw_speaker(rng, split, profile)
    passage = read_passage(rng, speaker.say, _GEN, profile.passages)
    if passage is None:
        return None
    text, audio = passage
    return _finish(audio, rng, split, profile, speaker.voice, text, profile.passages.seconds[1])


def _long_utterance(rng, split: str, profile: SynthProfile | None = None) -> Made | None:
    """Several sentences by one voice joined by short pauses, 20-60 s in all (clean in every profile: evaluation)."""
    low, high = DURATION_BOUNDS[split]
    voice = draw_voice(rng, split)
    passage = join_sentences(rng, voice, low, high, rng.uniform(low + 5.0, high - 5.0))
    return None if passage is None else Made(passage[0], voice, passage[1], None)


def _make_copies(job: tuple[int, str, int, str, str]) -> tuple[UtteranceMeta, UtteranceMeta | None]:
    """Pool task: synthesize utterance `index` of `split`, write its FLAC file and, for a clean-copy
    profile's train split, its clean copy's (asr.synth.clean_copy); their records."""
    seed, split, index, out_dir, profile_name = job
    profile = PROFILES[profile_name].for_split(split)
    make = _long_utterance if split == "long" else _short_utterance
    passage = profile.passages is not None and is_passage(seed, index, profile.passages.share)
    if passage:
        make = _passage_utterance
    for attempt in range(MAX_ATTEMPTS):
        result = make(sentence_rng(seed, split, index, attempt), split, profile)
        if result is not None:
            break
    else:
        raise RuntimeError(f"no {split} utterance within {DURATION_BOUNDS[split]} s after {MAX_ATTEMPTS} tries")
    cut_id = f"{split}-{index:06d}"
    meta = _write(out_dir, cut_id, f"audio/{split}/{cut_id}.flac", result, profile, passage)
    if result.clean is None:
        return meta, None
    return meta, _write(out_dir, clean_copy_id(cut_id), clean_copy_audio_path(cut_id), result.clean,
                        profile.without_surroundings(), passage)


def _write(out_dir: str, cut_id: str, rel_path: str, made: Made, profile: SynthProfile, passage: bool
           ) -> UtteranceMeta:
    """Write ``made``'s FLAC file at ``rel_path`` under ``out_dir``; its record."""
    conditions, voice = made.conditions, made.voice
    if conditions is None and not profile.is_clean:
        conditions = "none"  # a profile without acoustic conditions; the voice settings are still recorded
    sf.write(Path(out_dir) / rel_path, made.audio, SAMPLE_RATE, format="FLAC", subtype="PCM_16")
    return UtteranceMeta(cut_id, rel_path, made.text, voice.voice, voice.rate, voice.pitch, len(made.audio),
                         voice.pitch_span, voice.word_gap, conditions, passage)


def start_pool(workers: int):
    """Set up synthesis in this process and return a pool of ``workers`` (None for one).

    The parent is set up first so a missing library or voice fails here, not in a worker.
    """
    _init_worker()
    check_voices_exist(_SYNTH.data_path)
    return mp.get_context("fork").Pool(workers, initializer=_init_worker,
                                           maxtasksperchild=WORKER_MAX_TASKS) if workers > 1 else None


def build_split(cfg: SynthConfig, split: str, pool=None) -> tuple[CutSet, float]:
    """Synthesize one split; returns its cuts and the seconds of audio made. The train split of a
    clean-copy profile writes its clean copies' manifest (asr.synth.clean_copy) here too."""
    target = cfg.hours(split) * 3600.0
    audio_dir = Path(cfg.out_dir) / "audio" / split
    audio_dir.mkdir(parents=True, exist_ok=True)
    for stale in audio_dir.glob("*.flac"):
        stale.unlink()
    clean_copies = PROFILES[cfg.profile].for_split(split).clean_copy
    if split == "train":
        start_clean_copies(cfg.out_dir, clean_copies)
    mapper = pool.imap if pool is not None else map
    metas: list[UtteranceMeta] = []
    clean_metas: list[UtteranceMeta] = []
    total = 0.0
    next_index = 0
    mean_guess = 40.0 if split == "long" else 3.5
    with tqdm(total=round(target), unit="s", desc=f"synth {split}", leave=True) as bar:
        while total < target:
            # a bounded batch; results past the target are discarded so the split ends at the same index
            n = max(2 * max(cfg.workers, 1), math.ceil((target - total) / mean_guess))
            jobs = ((cfg.seed, split, i, cfg.out_dir, cfg.profile) for i in range(next_index, next_index + n))
            next_index += n
            for meta, clean in mapper(_make_copies, jobs):
                if total >= target:
                    for made in (meta, clean) if clean is not None else (meta,):
                        (Path(cfg.out_dir) / made.audio_path).unlink()
                    continue
                metas.append(meta)
                if clean is not None:
                    clean_metas.append(clean)
                seconds = meta.num_samples / SAMPLE_RATE
                total += seconds
                bar.update(round(total) - bar.n)
    if clean_copies:
        write_cuts(CutSet.from_cuts(to_cut(m) for m in clean_metas), Path(cfg.out_dir) / CLEAN_MANIFEST)
    return CutSet.from_cuts(to_cut(m) for m in metas), total


def build_synth_corpus(cfg: SynthConfig, force: bool = False, log=print) -> dict:
    """Build every split missing from `cfg.out_dir` (all of them with force) and the summary."""
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    todo = [s for s in SPLITS if force or not (out / f"cuts_{s}.jsonl.gz").is_file()]
    built_profile = corpus_profile(out)
    if "train" not in todo and (built_profile or "clean") != cfg.profile:
        log(f"train: built with profile {built_profile!r}, {cfg.profile!r} asked: rebuilding it")
        todo.insert(0, "train")
    if "train" not in todo and PROFILES[cfg.profile].clean_copy and not (out / CLEAN_MANIFEST).is_file():
        log(f"train: its clean copies ({CLEAN_MANIFEST}) are missing: rebuilding it")
        todo.insert(0, "train")
    made_seconds, started = 0.0, time.perf_counter()
    if todo:
        require("espeakng_loader", "synth", "the synth corpus")  # here, not in a pool worker's initializer
    if "train" in todo and PROFILES[cfg.profile].pico_share > 0:
        PicoSynthesizer()  # without ttspico: say how to install it now, not from inside a pool worker
    if "train" in todo and PROFILES[cfg.profile].neural_share > 0:
        NeuralSynthesizer()  # the same for the neural voices' wheels
    if todo:
        pool = start_pool(cfg.workers)
        try:
            for split in todo:
                if cfg.hours(split) <= 0:
                    continue
                cuts, seconds = build_split(cfg, split, pool)
                write_cuts(cuts, out / f"cuts_{split}.jsonl.gz")
                made_seconds += seconds
        finally:
            if pool is not None:
                pool.close()
                pool.join()
    for split in SPLITS:
        if split not in todo and (out / f"cuts_{split}.jsonl.gz").is_file():
            log(f"{split}: already built (use --force to rebuild)")
    elapsed = time.perf_counter() - started
    summary = summarize_corpus(out, cfg.seed, cfg.profile)
    (out / "manifest_summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    for split, info in summary["splits"].items():
        log(f"{split:>5}: {info['utterances']:6d} utts  {info['hours']:.3f} h  {info['voices']:4d} voices  "
            f"{info['distinct_words']:5d} distinct words  {info['min_duration']:.1f}-{info['max_duration']:.1f} s")
    if made_seconds > 0:
        log(f"synthesized {made_seconds / 3600:.3f} h in {elapsed:.1f} s = {made_seconds / elapsed:.0f}x real time "
            f"({cfg.workers} workers)")
    return summary


def corpus_profile(out_dir: str | Path) -> str | None:
    """The profile the corpus in out_dir was built with (corpora from before profiles: clean); None if none is."""
    summary = Path(out_dir) / "manifest_summary.json"
    if not summary.is_file():
        return None
    return json.loads(summary.read_text()).get("profile", "clean")


def summarize_corpus(out_dir: str | Path, seed: int | None = None, profile: str = "clean") -> dict:
    """Per-split counts read back from the manifests (deterministic: no timings); the train split's clean
    copies (asr.synth.clean_copy) count as the split ``train_clean``."""
    splits = {}
    for split in (*SPLITS, CLEAN_SPLIT):
        path = Path(out_dir) / f"cuts_{split}.jsonl.gz"
        if not path.is_file():
            continue
        cuts = list(CutSet.from_file(path))
        durations = [c.duration for c in cuts] or [0.0]
        words = {w for c in cuts for s in c.supervisions for w in s.text.split()}
        splits[split] = {
            "utterances": len(cuts), "hours": round(sum(durations) / 3600, 4),
            "voices": len({c.custom["voice"] for c in cuts}), "distinct_words": len(words),
            "min_duration": round(min(durations), 3), "max_duration": round(max(durations), 3),
        }
        passages = [c.duration for c in cuts if c.custom and c.custom.get("passage")]
        if passages:
            splits[split].update(passages=len(passages), passage_hours=round(sum(passages) / 3600, 4))
    return {"corpus": "synth", "seed": seed, "profile": profile, "sample_rate": SAMPLE_RATE, "splits": splits}
