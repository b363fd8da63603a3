"""Endpoints that hear the audio: an utterance of a streamed file ends at a pause in its levels.

Axis legend: T feature frames (10 ms), F mel bins.

Why: the CTC blank rule (:mod:`asr.decode.endpoint`) measures a pause by the recognizer's blank run, which
starts inside the last word (CTC emits a word's token early) and ends inside the next one (the path lags
the onset), so it cannot find the 0.15-0.5 s pauses between the sentences of a recording without also
splitting words at their gaps. The audio shows those pauses plainly: frames far under the level of the
speech around them, which :class:`asr.decode.segment.PauseSegmenter` finds on a whole file, offline. Here
the same, causally, as a stream meets its frames:

* a frame's level is its mean log-mel over the bins in dB (the speech gate's level): the total energy (the
  segmenter's level) falls 20-25 dB from a vowel to the fricatives and closures beside it for long enough
  to pass for a pause, the mean over the bins, which a fricative's broad spectrum keeps up, much less;
* the speech level follows the frames as the online CMN's :class:`~asr.model.normalization.SpeechGate`
  follows it, ``R_t = max(e_t, R_{t-1} - decay)``: it jumps to a louder frame at once and falls slowly
  (``decay_db_per_s``) while frames are quieter, so a pause is judged against the speech before it and a
  speaker who gets quieter takes over within seconds. It starts at the level of the model's global mean
  frame (``reference_db``, the training set's typical frame), so a silent lead-in is judged as a pause too;
* a frame is quiet when it lies more than ``margin_db`` under the speech level, or more than ``floor_db``
  under the reference (digital silence, whatever the tracker did);
* a pause is ``min_pause_s`` of consecutive quiet frames, and it ends the utterance only after
  ``min_speech_s`` of frames that were not quiet since the utterance started, so silence alone (a lead-in,
  a long gap) ends no utterance and resets do not cascade.

The decision at frame t reads frames up to t only (:class:`PauseTracker` carries the speech level across
calls; :meth:`PauseEndpointer.advance` stops where a pause is found), so a stream decides as the whole
input would, whatever the pieces it arrives in.

Where the next utterance starts: at the frame where the pause is found (``min_pause_s`` into it), less
``replay_s`` of the pause's frames the stream has buffered already (never before the pause began). The
utterance that ended reads every frame up to the found point, its last chunk flushed as a partial one,
so its last word has the pause after it; the next one starts in the pause, before its first word,
however long the pause.

The defaults (0.2 s of frames 20 dB under the speech level) were chosen on the dev split's long file: they find
its pauses between sentences and almost none inside them (data/results/long_audio.md). A background less
than ``margin_db`` under the speaker hides the pauses from this rule.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from asr.data.features import DB_PER_NEPER, FRAME_SHIFT_S
from asr.model.normalization import decaying_peak


@dataclass(frozen=True)
class PauseRule:
    """When a pause ends an utterance (see the module docstring).

    min_pause_s: quiet seconds that make a pause (shorter quiet runs, stop closures and the gaps between
        words, stay inside an utterance).
    margin_db: frames more than this under the tracked speech level are quiet (a background this far under
        the speaker counts as a pause).
    decay_db_per_s: how fast the tracked speech level falls while frames are quieter.
    floor_db: frames more than this under the reference level (the model's mean frame) are always quiet.
    min_speech_s: seconds of frames that were not quiet an utterance needs before a pause can end it.
    replay_s: seconds of the pause, before the point it was found, that the next utterance starts with.
    max_utterance_s: an utterance this long ends at its next quiet frame (as Wenet's 20 s rule ends it at its
        next blank frame), so the search reads a bounded number of frames however long the speech runs.
    """

    min_pause_s: float = 0.2
    margin_db: float = 20.0
    decay_db_per_s: float = 2.0
    floor_db: float = 40.0
    min_speech_s: float = 0.1
    replay_s: float = 0.0
    max_utterance_s: float = 20.0

    def __post_init__(self) -> None:
        for name in ("min_pause_s", "margin_db", "decay_db_per_s", "floor_db", "max_utterance_s"):
            value = getattr(self, name)
            if not 0.0 < value < math.inf:
                raise ValueError(f"PauseRule.{name} ({value}) must be a finite number > 0.")
        for name in ("min_speech_s", "replay_s"):
            value = getattr(self, name)
            if not 0.0 <= value < math.inf:
                raise ValueError(f"PauseRule.{name} ({value}) must be a finite number >= 0.")
        if self.pause_frames < 1:
            raise ValueError(f"PauseRule.min_pause_s ({self.min_pause_s}) is shorter than a feature frame "
                             f"({FRAME_SHIFT_S} s).")

    @property
    def pause_frames(self) -> int:
        return int(round(self.min_pause_s / FRAME_SHIFT_S))

    @property
    def speech_frames(self) -> int:
        return int(round(self.min_speech_s / FRAME_SHIFT_S))

    @property
    def max_utterance_frames(self) -> int:
        return max(int(round(self.max_utterance_s / FRAME_SHIFT_S)), 1)

    @property
    def replay_frames(self) -> int:
        return int(round(self.replay_s / FRAME_SHIFT_S))

    def settings(self) -> dict:
        """JSON-ready: what a summary records."""
        return dataclasses.asdict(self)


def frame_levels(feats: torch.Tensor) -> torch.Tensor:
    """(T, F) log-mel -> (T,) float64 mean log-mel of each frame over its bins, in dB."""
    if feats.dim() != 2:
        raise ValueError(f"feats must be one input (T, F), got {tuple(feats.shape)}.")
    return feats.double().mean(dim=1) * DB_PER_NEPER


def reference_level(global_mean: torch.Tensor) -> float:
    """The level (dB) of the model's global mean frame (F,) (its ``cmvn_mean``): where the speech level starts."""
    return float(frame_levels(torch.as_tensor(global_mean)[None])[0])


class PauseTracker:
    """Per frame, whether it is quiet: the tracked speech level of a stream, fed its frames in order."""

    def __init__(self, rule: PauseRule, reference_db: float) -> None:
        if not math.isfinite(reference_db):
            raise ValueError(f"reference_db ({reference_db}) must be a finite level in dB.")
        self.rule = rule
        self.reference_db = reference_db
        self.speech_db = reference_db  # R_{t-1}
        self._decay = rule.decay_db_per_s * FRAME_SHIFT_S  # dB a frame

    def judge(self, feats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(n, F) next frames -> (quiet (n,) bool, the speech level after each frame (n,) float64 dB); the
        tracker does not move (:meth:`quiet` does)."""
        levels = frame_levels(feats)  # (n,)
        speech = decaying_peak(levels, torch.tensor(self.speech_db, dtype=torch.float64), self._decay)  # (n,) R_t
        rule = self.rule
        return (levels < speech - rule.margin_db) | (levels < self.reference_db - rule.floor_db), speech

    def quiet(self, feats: torch.Tensor) -> torch.Tensor:
        """(n, F) next frames -> (n,) bool, each quiet or not; the speech level moves past them."""
        quiet, speech = self.judge(feats)
        if speech.numel():
            self.speech_db = float(speech[-1])
        return quiet


class PauseEndpointer:
    """Where the utterances of one stream end at pauses.

    The stream's frames are heard in order (:meth:`listen`); each frame's quiet flag is kept from the current
    utterance's start on. :meth:`start` begins an utterance at a stream frame already heard (where a pause or
    another rule ended the last one), :meth:`pause` says where the first pause after it that ends it lies.
    """

    def __init__(self, rule: PauseRule, reference_db: float) -> None:
        self.rule = rule
        self.tracker = PauseTracker(rule, reference_db)
        self._quiet: list[bool] = []  # flags of stream frames [_first, heard)
        self._first = 0
        self.start(0)

    @property
    def heard(self) -> int:
        """Frames of the stream heard so far."""
        return self._first + len(self._quiet)

    def listen(self, feats: torch.Tensor) -> None:
        """(n, F) the stream's next frames."""
        self._quiet += self.tracker.quiet(feats).tolist()

    def start(self, frame: int) -> None:
        """A new utterance from stream frame ``frame`` (heard already or the next one): no speech, no quiet run
        yet; the speech level carries on."""
        if not self._first <= frame <= self.heard:
            raise ValueError(f"an utterance starts at a frame heard since the last start: {frame} is not in "
                             f"[{self._first}, {self.heard}].")
        del self._quiet[: frame - self._first]
        self._first = self._position = frame
        self._speech = self._quiet_run = 0

    def pause(self) -> tuple[int, int] | None:
        """(end, restart) for the first pause in the frames heard that ends the utterance, else None.

        end: the frame after the pause's ``min_pause_s``-th quiet frame (where it is found; the utterance reads
        the frames before it). restart: where the next utterance starts, ``replay_s`` before ``end`` and
        within the pause's quiet frames. An utterance of ``max_utterance_s`` ends at its next quiet frame (end =
        restart: nothing replayed).
        """
        rule = self.rule
        needed = max(rule.speech_frames, 1)
        for is_quiet in self._quiet[self._position - self._first :]:
            self._position += 1
            if not is_quiet:
                self._speech += 1
                self._quiet_run = 0
                continue
            self._quiet_run += 1
            if self._position - self._first >= rule.max_utterance_frames:
                return self._position, self._position
            if self._quiet_run >= rule.pause_frames and self._speech >= needed:
                return self._position, self._position - min(rule.replay_frames, self._quiet_run)
        return None
