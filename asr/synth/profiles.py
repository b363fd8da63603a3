"""Synthesis profiles: what a corpus build does to the train split (voices, engines, rooms, capture paths,
live surroundings, clean copies), the named profiles ``scripts/prepare_data.py --profile`` offers, and the
default one. Dev, test and long stay clean under every profile (`SynthProfile.for_split`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from asr.synth.capture import TRAIN_RANGES, CaptureRanges
from asr.synth.conditions import ConditionRanges
from asr.synth.live import LiveRanges
from asr.synth.passages import PassageRanges

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
# (data/results/corpus_profiles.md, capture.md); rooms with clean copies, because a model trained on the
# clean voice alone loses 10-20 points to a television or music 20 dB under the speaker, and the room
# curriculum (conf/experiment/quickstart_rooms.yaml) keeps the clean test where it was
# (data/results/robust.md). SynthConfig itself keeps "clean", the cheap one.
DEFAULT_PROFILE = "neural_hibari_capture30_rooms_curriculum"
