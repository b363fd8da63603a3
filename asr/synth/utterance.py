"""One synthesized utterance's record and its Lhotse cut: what every split builder of the corpus writes
(``asr.synth.corpus`` and the capture, flite, probe and biasing splits beside it)."""

from __future__ import annotations

from dataclasses import dataclass

from lhotse import AudioSource, MonoCut, Recording, SupervisionSegment

from asr.data.features import SAMPLE_RATE


@dataclass(frozen=True)
class UtteranceMeta:
    cut_id: str
    audio_path: str  # relative to the corpus folder
    text: str
    voice: str
    rate: int
    pitch: int
    num_samples: int
    pitch_span: int = 50
    word_gap: int = 0
    conditions: str | None = None  # Conditions.describe(), or "none", for a train utterance of a non-clean profile
    passage: bool = False  # several sentences with pauses (asr.synth.passages)


def to_cut(meta: UtteranceMeta) -> MonoCut:
    duration = meta.num_samples / SAMPLE_RATE
    rec = Recording(
        id=meta.cut_id, sources=[AudioSource(type="file", channels=[0], source=meta.audio_path)],
        sampling_rate=SAMPLE_RATE, num_samples=meta.num_samples, duration=duration,
    )
    sup = SupervisionSegment(
        id=meta.cut_id, recording_id=meta.cut_id, start=0.0, duration=duration, channel=0,
        text=meta.text, language="en", speaker=meta.voice,
    )
    custom = {"voice": meta.voice, "rate": meta.rate, "pitch": meta.pitch, "speaker": meta.voice}
    if meta.conditions is not None:
        custom.update(pitch_span=meta.pitch_span, word_gap=meta.word_gap, conditions=meta.conditions)
    if meta.passage:
        custom["passage"] = True
    return MonoCut(id=meta.cut_id, start=0.0, duration=duration, channel=0, recording=rec,
                   supervisions=[sup], custom=custom)
