"""Endpoint detection from CTC blank posteriors (Kaldi / Wenet style rules).

A frame is non-speech when its CTC blank probability exceeds ``blank_threshold``.
A rule fires when all its conditions hold for the current utterance:

* ``must_contain_speech``: at least one speech frame was seen;
* trailing non-speech lasted at least ``min_trailing_silence_s``;
* the utterance is at least ``min_utterance_s`` long.

The defaults are Wenet's: no speech for 5 s; 1 s of silence after speech; an
utterance of 20 s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class EndpointRule:
    """One rule; all conditions must hold (see the module docstring)."""

    must_contain_speech: bool
    min_trailing_silence_s: float
    min_utterance_s: float = 0.0

    def __post_init__(self) -> None:
        if self.min_trailing_silence_s < 0 or self.min_utterance_s < 0:
            raise ValueError(
                f"endpoint rule durations must be >= 0, got min_trailing_silence_s="
                f"{self.min_trailing_silence_s}, min_utterance_s={self.min_utterance_s}."
            )
        if self.min_trailing_silence_s == 0 and self.min_utterance_s == 0:
            raise ValueError("an endpoint rule with no trailing silence and no utterance length would fire at once.")

    def fires(self, speech_seen: bool, trailing_silence_s: float, utterance_s: float) -> bool:
        return (
            (speech_seen or not self.must_contain_speech)
            and trailing_silence_s >= self.min_trailing_silence_s
            and utterance_s >= self.min_utterance_s
        )


DEFAULT_RULES = (
    EndpointRule(must_contain_speech=False, min_trailing_silence_s=5.0),
    EndpointRule(must_contain_speech=True, min_trailing_silence_s=1.0),
    EndpointRule(must_contain_speech=True, min_trailing_silence_s=0.0, min_utterance_s=20.0),
)


@dataclass(frozen=True)
class EndpointConfig:
    """Endpointing settings; ``enabled=False`` never reports an endpoint."""

    enabled: bool = True
    blank_threshold: float = 0.8
    rules: tuple[EndpointRule, ...] = field(default=DEFAULT_RULES)

    def __post_init__(self) -> None:
        if not 0.0 < self.blank_threshold < 1.0:
            raise ValueError(f"blank_threshold ({self.blank_threshold}) must be a probability in (0, 1).")


class EndpointDetector:
    """Counts speech and trailing non-speech frames of one utterance.

    Args:
        config: the rules.
        blank_id: CTC blank index.
        frame_s: seconds per encoder frame.
    """

    def __init__(self, config: EndpointConfig, blank_id: int, frame_s: float) -> None:
        if frame_s <= 0:
            raise ValueError(f"frame_s ({frame_s}) must be > 0.")
        self.config = config
        self.blank_id = blank_id
        self.frame_s = frame_s
        self._log_threshold = math.log(config.blank_threshold)
        self.reset()

    def reset(self) -> None:
        """A new utterance: no frames, no speech."""
        self.frames = 0
        self.trailing_silence_frames = 0
        self.speech_seen = False

    def advance(self, log_probs: torch.Tensor) -> None:
        """Consume (t, V) CTC log-probabilities of the next t frames."""
        if log_probs.dim() != 2:
            raise ValueError(f"log_probs must be (t, V), got shape {tuple(log_probs.shape)}.")
        silent = (log_probs[:, self.blank_id] > self._log_threshold).tolist()
        for is_silent in silent:
            if is_silent:
                self.trailing_silence_frames += 1
            else:
                self.trailing_silence_frames = 0
                self.speech_seen = True
        self.frames += len(silent)

    def is_endpoint(self) -> bool:
        if not self.config.enabled or self.frames == 0:
            return False
        trailing = self.trailing_silence_frames * self.frame_s
        length = self.frames * self.frame_s
        return any(rule.fires(self.speech_seen, trailing, length) for rule in self.config.rules)
