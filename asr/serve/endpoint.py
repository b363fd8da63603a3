"""Endpoint detection from CTC blank posteriors (Kaldi / Wenet style rules).

A frame is non-speech when its CTC blank probability exceeds ``blank_threshold``.
A rule fires when all its conditions hold for the current utterance:

* ``must_contain_speech``: at least one speech frame was seen;
* trailing non-speech lasted at least ``min_trailing_silence_s``;
* the utterance is at least ``min_utterance_s`` long.

The defaults are Wenet's: no speech for 5 s; 1 s of silence after speech; an
utterance of 20 s (:func:`default_rules` takes another trailing silence).

:meth:`EndpointDetector.advance_to_endpoint` decides at frame resolution and says where the
next utterance starts: when speech resumes after the endpoint inside the same chunk, the next
utterance starts right after the silence that ended this one, so its onset is not lost to
this utterance's final.

``EndpointConfig.reset`` says what restarts at an endpoint besides the decoder: the encoder's
cache (``cache``, as Wenet's runtime resets its model), the online CMN's running sums
(``cmn``), ``both`` or ``none`` (continuous decoding carries both on).
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


DEFAULT_TRAILING_SILENCE_S = 1.0  # Wenet's


def default_rules(trailing_silence_s: float = DEFAULT_TRAILING_SILENCE_S) -> tuple[EndpointRule, ...]:
    """Wenet's three rules, with ``trailing_silence_s`` of silence after speech ending an utterance."""
    return (
        EndpointRule(must_contain_speech=False, min_trailing_silence_s=5.0),
        EndpointRule(must_contain_speech=True, min_trailing_silence_s=trailing_silence_s),
        EndpointRule(must_contain_speech=True, min_trailing_silence_s=0.0, min_utterance_s=20.0),
    )


DEFAULT_RULES = default_rules()
ENDPOINT_RESETS = ("none", "cache", "cmn", "both")


@dataclass(frozen=True)
class EndpointConfig:
    """Endpointing settings; ``enabled=False`` never reports an endpoint."""

    enabled: bool = True
    blank_threshold: float = 0.8
    rules: tuple[EndpointRule, ...] = field(default=DEFAULT_RULES)
    reset: str = "none"  # what restarts at an endpoint besides the decoder (ENDPOINT_RESETS)

    def __post_init__(self) -> None:
        if not 0.0 < self.blank_threshold < 1.0:
            raise ValueError(f"blank_threshold ({self.blank_threshold}) must be a probability in (0, 1).")
        if self.reset not in ENDPOINT_RESETS:
            raise ValueError(f"endpoint reset {self.reset!r} is not one of {', '.join(ENDPOINT_RESETS)}.")

    @property
    def resets_cache(self) -> bool:
        return self.reset in ("cache", "both")

    @property
    def resets_cmn(self) -> bool:
        return self.reset in ("cmn", "both")


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
        for is_silent in self._silent(log_probs):
            self._count(is_silent)

    def advance_to_endpoint(self, log_probs: torch.Tensor) -> int | None:
        """Consume (t, V) frames up to an endpoint; returns where the next utterance starts, or None.

        None: no rule fired, all t frames were consumed. Else s in (0, t]: frames [0, s) belong to the
        utterance that ended. s is t unless speech resumes inside these frames after a silent frame at
        or after the endpoint frame; then s is the frame after that silent frame, and frames [s, t)
        (the silence before the new speech and its onset) are the next utterance's.
        """
        silent = self._silent(log_probs)
        for fired, is_silent in enumerate(silent):
            self._count(is_silent)
            if self.is_endpoint():
                break
        else:
            return None
        # A rule that fires during speech (the utterance length) splits at the first pause after it.
        pause = next((i for i in range(fired, len(silent)) if silent[i]), None)
        start = len(silent)
        if pause is not None and not all(silent[pause + 1 :]):
            start = pause + 1
        for is_silent in silent[fired + 1 : start]:
            self._count(is_silent)
        return start

    def _silent(self, log_probs: torch.Tensor) -> list[bool]:
        if log_probs.dim() != 2:
            raise ValueError(f"log_probs must be (t, V), got shape {tuple(log_probs.shape)}.")
        return (log_probs[:, self.blank_id] > self._log_threshold).tolist()

    def _count(self, is_silent: bool) -> None:
        if is_silent:
            self.trailing_silence_frames += 1
        else:
            self.trailing_silence_frames = 0
            self.speech_seen = True
        self.frames += 1

    def is_endpoint(self) -> bool:
        if not self.config.enabled or self.frames == 0:
            return False
        trailing = self.trailing_silence_frames * self.frame_s
        length = self.frames * self.frame_s
        return any(rule.fires(self.speech_seen, trailing, length) for rule in self.config.rules)
