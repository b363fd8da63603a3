"""Backgrounds mixed under training utterances on their log-mel features: another talker, noise, music.

Why the features and not the waveform: a recipe that trains from stored fbank (``asr.data.feature_store``)
would otherwise compute every mixed utterance's fbank again in the loader, which on a 2-core host takes the
CPU the model needs. Mel energies of independent sources add (their cross terms average to zero over a
band's FFT bins), so a mixture's log-mel is ``log(exp(speech) + g * exp(background))`` up to that average:
the same sum a waveform mix followed by the fbank gives, without the fbank.

The background is either another utterance of the same batch (a talker behind the speaker: a colleague, a
television) or a clip of a noise manifest (``noise_cuts``: white, pink, brown noise and music-like tones
from ``asr.synth.noise_bank``, or any recorded noise such as MUSAN), whose fbank the dataset computes
once. It also plays alone for a lead-in before the speaker starts: a stream that hears talk or music
before the sentence is what a live microphone gives, and a model that has only heard silence there
carries the background into the sentence's first words.

The SNR is the ratio of mean mel energy per frame, speech over background, over the speech's frames
(the filterbank's view of the usual waveform SNR; the two differ by the filterbank's weighting of the
spectrum, a few dB for coloured noise).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class BackgroundMix:
    """How often a training utterance gets a background, at what level, and from which epoch.

    prob: share of the utterances that get one (0: off).
    snr_db: the SNR is drawn uniform in this range.
    talker_share: of those, the share whose background is another utterance of the batch; the rest get
        a clip of ``noise_cuts`` (all get a talker when there is no noise manifest).
    lead_in_max_s: the background alone before the speaker, uniform in [0, lead_in_max_s] seconds.
    under_speech: False: the background stops where the speech starts (it fills the lead-in alone, and the
        utterance's frames stay as they were): talk or music before a sentence, without more noise in it.
    from_epoch: no background before this epoch (CTC from scratch aligns later under backgrounds).
    noise_cuts: a manifest of noise clips (in the corpus folder unless absolute), or None.
    """

    prob: float = 0.0
    snr_db: tuple[float, float] = (5.0, 25.0)
    talker_share: float = 0.5
    lead_in_max_s: float = 1.5
    under_speech: bool = True
    from_epoch: int = 0
    noise_cuts: str | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.prob <= 1.0 or not 0.0 <= self.talker_share <= 1.0:
            raise ValueError(f"background: prob ({self.prob}) and talker_share ({self.talker_share}) must be in [0, 1]")
        low, high = self.snr_db
        if low > high:
            raise ValueError(f"background: snr_db range is empty: {low} > {high}")
        if self.lead_in_max_s < 0 or self.from_epoch < 0:
            raise ValueError(f"background: lead_in_max_s ({self.lead_in_max_s}) and from_epoch ({self.from_epoch}) "
                             "must be >= 0")

    @property
    def enabled(self) -> bool:
        return self.prob > 0.0

    @classmethod
    def from_dict(cls, values: Mapping[str, Any] | BackgroundMix | None) -> BackgroundMix:
        """From a config group (a Hydra DictConfig or a dict); None: off. Unknown keys are an error."""
        if values is None:
            return cls()
        if isinstance(values, BackgroundMix):
            return values
        known = set(asdict(cls()))
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"data.background: unknown keys {unknown}; valid: {sorted(known)}")
        fields = dict(values)
        if "snr_db" in fields:
            fields["snr_db"] = tuple(float(v) for v in fields["snr_db"])
        return cls(**fields)


def loop_to(background: torch.Tensor, frames: int, start: int) -> torch.Tensor:
    """(S, F) -> (frames, F): the background from frame ``start`` on, looped as often as ``frames`` needs."""
    if background.shape[0] == 0:
        raise ValueError("an empty background has no frames to loop")
    rolled = torch.roll(background, shifts=-(start % background.shape[0]), dims=0)
    reps = -(-frames // rolled.shape[0])
    return rolled.repeat(reps, 1)[:frames]


def mix_log_mel(speech: torch.Tensor, background: torch.Tensor, snr_db: float, speech_from: int = 0,
                floor: torch.Tensor | None = None) -> torch.Tensor:
    """(T, F) speech + (T, F) background, both log-mel, -> (T, F) log-mel of their sum at ``snr_db``.

    The background is scaled so that the speech's mean mel energy per frame over frames ``speech_from:``
    is ``snr_db`` over the background's on the same frames; frames before ``speech_from`` (a lead-in)
    get the background at that same gain. ``floor`` (F,): the log-mel of digital silence (the frontend's
    clamp), taken out of the background's energies before they are scaled: a silent stretch of a quiet
    background scaled up stays silent, as it would on the waveform. A background with no energy over its
    floor leaves the speech as it is. Computed in float64, returned in the speech's dtype.
    """
    if speech.shape != background.shape:
        raise ValueError(f"speech {tuple(speech.shape)} and background {tuple(background.shape)} differ in shape")
    if not 0 <= speech_from < speech.shape[0]:
        raise ValueError(f"speech_from ({speech_from}) must index a frame of the {speech.shape[0]}")
    speech_energy, energy = torch.exp(speech.double()), torch.exp(background.double())  # (T, F) mel energies
    if floor is not None:
        energy = (energy - torch.exp(floor.double())).clamp_min(0.0)
    over_speech = energy[speech_from:].sum()
    if not bool(over_speech > 0):
        return speech
    # both sums run over the same frames, so their ratio is that of the mean energies per frame
    gain = speech_energy[speech_from:].sum() / over_speech / 10.0 ** (snr_db / 10.0)
    return torch.log(speech_energy + gain * energy).to(speech.dtype)
