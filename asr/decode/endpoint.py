"""Endpoint detection from CTC blank posteriors (Kaldi / Wenet style rules): the server's streams
(``asr.serve.stream``) and decode.py's long inputs (``asr.decode.endpointed``) end utterances by them.

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

The speaker's level (``EndpointConfig.speaker_margin_db``): behind a speaker, a television or
other people talk; the VAD hears speech all the time and the recognizer emits their words, so
neither blank frames nor the VAD end the speaker's sentence. Given each frame's audio level
(:class:`LevelTrack`), the detector follows the speaker's level (:class:`SpeakerLevel`: the
loudest frame the recognizer emitted on, falling slowly) and counts a frame more than
``speaker_margin_db`` under it as non-speech whatever the recognizer says: talk that far under
the speaker is not the speaker. The speaker's level lasts the stream (it outlives each
utterance). A frame whose level is not known counts by its blank probability alone.

A frame is judged by the audio around it, not by itself (``speaker_window_s``): its level is the
loudest known level within half the window either side (:func:`surrounding_levels`), because a
word's unvoiced consonants, onsets and endings sit 20-30 dB under the vowels next to them. The
window sees the frames before a chunk and the chunk's own frames, never later ones (their audio
need not have arrived, and what has depends on how the client cut it), so the last frames of a
chunk see less of what follows: a quiet onset there whose vowel falls in the next chunk is judged
by what came before it. The same decision ends utterances and, with ``suppress_background``,
makes the frame a certain blank for the search, so the background's words are not emitted as
the speaker's.

The search is told a frame is background only when its whole chunk ahead of it is too
(:func:`loudest_ahead`): a frame's output is computed from every frame of its chunk (chunk
attention), so the recognizer emits a word on frames before the word's own audio, most of all on
the first frames of a VAD segment, whose pre-roll is the silence before the onset. Judged by its
own audio, such a frame would make the sentence's first word a blank. The endpoint rule keeps the
window alone: counting those frames as speech would shorten the pause it measures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
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
    # Frames this many dB under the speaker's level are non-speech (None: blank probability alone). Why 15:
    # talk 15-20 dB under a speaker is a background; a word's own quiet frames are shorter than the
    # trailing silence a rule needs, so they cannot end it.
    speaker_margin_db: float | None = 15.0
    speaker_decay_db_s: float = 0.5  # how fast the speaker's level falls, so a quieter speaker takes over
    # Frames under the speaker's level are read as blank by the search too: the background's words are
    # not emitted as the speaker's (a choice for the benchmark to make; off: the search hears every frame).
    suppress_background: bool = False
    # A frame is background when the loudest frame within half this window either side is (see the module
    # docstring; 0: each frame by itself). About a syllable: a consonant next to its vowel is in the window.
    speaker_window_s: float = 0.28

    def __post_init__(self) -> None:
        if not 0.0 < self.blank_threshold < 1.0:
            raise ValueError(f"blank_threshold ({self.blank_threshold}) must be a probability in (0, 1).")
        if (self.speaker_margin_db is not None and self.speaker_margin_db <= 0) or self.speaker_decay_db_s < 0:
            raise ValueError(f"speaker_margin_db ({self.speaker_margin_db}) must be > 0 or None and "
                             f"speaker_decay_db_s ({self.speaker_decay_db_s}) >= 0.")
        if not 0.0 <= self.speaker_window_s < math.inf:
            raise ValueError(f"speaker_window_s ({self.speaker_window_s}) must be a finite number of seconds >= 0.")
        if self.reset not in ENDPOINT_RESETS:
            raise ValueError(f"endpoint reset {self.reset!r} is not one of {', '.join(ENDPOINT_RESETS)}.")

    @property
    def resets_cache(self) -> bool:
        return self.reset in ("cache", "both")

    @property
    def resets_cmn(self) -> bool:
        return self.reset in ("cmn", "both")


class LevelTrack:
    """The RMS level (dBFS, full scale 1.0) of each encoder frame of the audio a stream decodes.

    Frame k is the k-th block of ``frame_samples`` samples from the segment's first sample (the
    audio the frontend was given: with a VAD, its segment; else the stream). Silence is -inf.
    """

    def __init__(self, frame_samples: int) -> None:
        if frame_samples < 1:
            raise ValueError(f"frame_samples ({frame_samples}) must be >= 1.")
        self.frame_samples = frame_samples
        self.reset()

    def reset(self) -> None:
        """A new segment: frame 0 starts at the next sample."""
        self._levels: list[float] = []  # frames [_first, _first + len) of the segment
        self._first = 0
        self._pending = np.zeros(0, dtype=np.float64)

    def accept(self, samples: torch.Tensor) -> None:
        """(n,) samples the frontend was given next."""
        audio = np.concatenate([self._pending, samples.reshape(-1).double().numpy()])
        whole = audio.size - audio.size % self.frame_samples
        if whole:
            power = np.mean(np.square(audio[:whole].reshape(-1, self.frame_samples)), axis=1)
            with np.errstate(divide="ignore"):
                self._levels += (10.0 * np.log10(power)).tolist()
        self._pending = audio[whole:]

    def levels(self, first: int, count: int) -> torch.Tensor:
        """(count,) levels of frames [first, first + count); NaN for a frame whose audio is not complete
        (or was forgotten)."""
        out = torch.full((count,), float("nan"), dtype=torch.float64)
        low = max(first, self._first)
        known = self._levels[low - self._first : first + count - self._first] if first + count > low else []
        if known:
            out[low - first : low - first + len(known)] = torch.tensor(known, dtype=torch.float64)
        return out

    def forget_before(self, frame: int) -> None:
        """Drop the levels of frames before ``frame``: a stream reads its frames in order, so memory stays
        bounded however long a segment lasts (a stream without a VAD is one segment)."""
        drop = min(max(0, frame - self._first), len(self._levels))
        del self._levels[:drop]
        self._first += drop

    @property
    def kept_frames(self) -> int:
        return len(self._levels)


def surrounding_levels(levels_db: np.ndarray, earlier_db: np.ndarray, each_side: int) -> np.ndarray:
    """(t,) per frame of ``levels_db`` (t,): the loudest known level among the frames at most ``each_side``
    before and after it. ``earlier_db`` (e,): the levels of the e frames just before them (only the last
    ``each_side`` count); no frame after the t is known. NaN levels are unknown; a frame whose own level is
    unknown stays NaN (it is judged by its blank probability alone)."""
    if each_side < 0:
        raise ValueError(f"each_side ({each_side}) must be >= 0.")
    levels_db = np.asarray(levels_db, dtype=np.float64)
    if each_side == 0 or levels_db.size == 0:
        return levels_db.copy()
    earlier_db = np.asarray(earlier_db, dtype=np.float64)[-each_side:] if len(earlier_db) else np.zeros(0)
    padded = np.concatenate([np.full(each_side - earlier_db.size, np.nan), earlier_db, levels_db,
                             np.full(each_side, np.nan)])
    windows = np.lib.stride_tricks.sliding_window_view(padded, 2 * each_side + 1)  # (t, 2 * each_side + 1)
    around = np.fmax.reduce(windows, axis=1)  # fmax skips NaN: NaN only where the whole window is unknown
    around[np.isnan(levels_db)] = np.nan
    return around


def loudest_ahead(levels_db: np.ndarray) -> np.ndarray:
    """(t,) per frame of ``levels_db`` (t,): the loudest known level from it to the last frame (its chunk's
    rest). NaN levels are unknown; a frame whose own level is unknown stays NaN."""
    levels_db = np.asarray(levels_db, dtype=np.float64)
    ahead = np.fmax.accumulate(levels_db[::-1])[::-1]  # fmax skips NaN: NaN only where all ahead is unknown
    ahead[np.isnan(levels_db)] = np.nan
    return ahead


class SpeakerLevel:
    """The speaker's level in dB: the loudest frame the recognizer emitted on (a non-blank frame within the
    margin), falling by ``decay_db_s`` a second; None until the first such frame."""

    def __init__(self, margin_db: float, decay_db_s: float, frame_s: float) -> None:
        self.margin_db = margin_db
        self._decay = decay_db_s * frame_s  # dB a frame
        self.level_db: float | None = None

    def is_background(self, level_db: float) -> bool:
        """A frame this quiet is not the speaker (an unknown, NaN level never is)."""
        return self.level_db is not None and level_db < self.level_db - self.margin_db

    def update(self, level_db: float, emitted: bool) -> None:
        """One frame: the level falls by a frame's decay, and rises to a louder frame the recognizer emitted on."""
        if self.level_db is not None:
            self.level_db -= self._decay
        if emitted and not math.isnan(level_db) and not self.is_background(level_db):
            self.level_db = level_db if self.level_db is None else max(self.level_db, level_db)


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
        self.speaker = (SpeakerLevel(config.speaker_margin_db, config.speaker_decay_db_s, frame_s)
                        if config.speaker_margin_db is not None else None)  # lasts the stream, not an utterance
        # Frames either side of a frame whose levels judge it (the levels a caller passes as ``earlier_db``).
        self.context_frames = int(config.speaker_window_s / (2 * frame_s) + 1e-9)
        self.reset()

    def reset(self) -> None:
        """A new utterance: no frames, no speech."""
        self.frames = 0
        self.trailing_silence_frames = 0
        self.speech_seen = False
        self.background: list[bool] = []  # per frame of the last advance: under the speaker's level
        self.search_background: list[bool] = []  # and so is the rest of its chunk: a certain blank for the search

    def advance(self, log_probs: torch.Tensor, levels_db: torch.Tensor | None = None,
                earlier_db: torch.Tensor | None = None) -> None:
        """Consume (t, V) CTC log-probabilities of the next t frames (and their levels, when known: see
        :meth:`advance_to_endpoint`)."""
        for is_silent in self._silent(log_probs, levels_db, earlier_db):
            self._count(is_silent)

    def advance_to_endpoint(self, log_probs: torch.Tensor, levels_db: torch.Tensor | None = None,
                            earlier_db: torch.Tensor | None = None) -> int | None:
        """Consume (t, V) frames up to an endpoint; returns where the next utterance starts, or None.

        ``levels_db``: the frames' (t,) audio levels (:class:`LevelTrack`) for the speaker's-level rule;
        ``earlier_db``: the (``context_frames``,) levels of the frames just before them (None: unknown, as at
        a segment's start).

        None: no rule fired, all t frames were consumed. Else s in (0, t]: frames [0, s) belong to the
        utterance that ended. s is t unless speech resumes inside these frames after a silent frame at
        or after the endpoint frame; then s is the frame after that silent frame, and frames [s, t)
        (the silence before the new speech and its onset) are the next utterance's.
        """
        silent = self._silent(log_probs, levels_db, earlier_db)
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

    def _silent(self, log_probs: torch.Tensor, levels_db: torch.Tensor | None,
                earlier_db: torch.Tensor | None) -> list[bool]:
        """Per frame: non-speech (blank, or the audio around it under the speaker's level). The speaker's level
        follows the frames here, in order, whether or not an endpoint stops the count before them."""
        if log_probs.dim() != 2:
            raise ValueError(f"log_probs must be (t, V), got shape {tuple(log_probs.shape)}.")
        blank = (log_probs[:, self.blank_id] > self._log_threshold).tolist()
        self.background, self.search_background = [], []
        if self.speaker is None or levels_db is None:
            return blank
        if levels_db.shape != (log_probs.size(0),):
            raise ValueError(f"levels_db must be ({log_probs.size(0)},), got shape {tuple(levels_db.shape)}.")
        if earlier_db is not None and earlier_db.dim() != 1:
            raise ValueError(f"earlier_db must be (e,), got shape {tuple(earlier_db.shape)}.")
        levels = levels_db.double().numpy()
        earlier = earlier_db.double().numpy() if earlier_db is not None else np.zeros(0)
        around = surrounding_levels(levels, earlier, self.context_frames)
        heard = np.fmax(around, loudest_ahead(levels))  # what the recognizer heard when it emitted on the frame
        silent = []
        for is_blank, level, level_around, level_heard in zip(blank, levels.tolist(), around.tolist(), heard.tolist()):
            self.background.append(self.speaker.is_background(level_around))
            self.search_background.append(self.speaker.is_background(level_heard))  # implies background
            silent.append(is_blank or self.background[-1])
            self.speaker.update(level, emitted=not is_blank)  # the speaker's level: the frame's own
        return silent

    def suppressed(self, log_probs: torch.Tensor) -> torch.Tensor:
        """(t, V) ``log_probs`` of the last advance with its background frames (``search_background``) made
        certain blanks (when ``suppress_background``; else unchanged)."""
        judged = self.search_background
        if not self.config.suppress_background or not any(judged):
            return log_probs
        mask = torch.tensor(judged[: log_probs.size(0)] + [False] * (log_probs.size(0) - len(judged)))
        blank = torch.full_like(log_probs[0], float("-inf"))
        blank[self.blank_id] = 0.0
        return torch.where(mask[:, None], blank, log_probs)

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
