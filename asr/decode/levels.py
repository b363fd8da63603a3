"""Audio levels for the endpoint's speaker rule (:mod:`asr.decode.endpoint`): each encoder frame's level
(:class:`LevelTrack`), the loudest level around a frame (:func:`surrounding_levels`) and ahead of it in its chunk
(:func:`loudest_ahead`), the speaker's level (:class:`SpeakerLevel`) and the background's floor
(:class:`BackgroundFloor`). Levels are dB against full scale 1.0; NaN is an unknown level, -inf digital silence.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np
import torch


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


def loudest_ahead(levels_db: np.ndarray, frames: int | None = None) -> np.ndarray:
    """(t,) per frame of ``levels_db`` (t,): the loudest known level from it to the last frame (its chunk's
    rest), or to at most ``frames`` frames after it. NaN levels are unknown; a frame whose own level is unknown
    stays NaN."""
    levels_db = np.asarray(levels_db, dtype=np.float64)
    if frames is None or frames >= levels_db.size:
        ahead = np.fmax.accumulate(levels_db[::-1])[::-1]  # fmax skips NaN: NaN only where all ahead is unknown
    else:
        if frames < 0:
            raise ValueError(f"frames ({frames}) must be >= 0 or None.")
        padded = np.concatenate([levels_db, np.full(frames, np.nan)])
        ahead = np.fmax.reduce(np.lib.stride_tricks.sliding_window_view(padded, frames + 1), axis=1)
    ahead[np.isnan(levels_db)] = np.nan
    return ahead


def is_background_level(level_db: float, speaker_db: float | None, speaker_margin_db: float, floor_db: float | None,
                        floor_margin_db: float | None, unknown_floor: bool = False) -> bool:
    """Whether audio at ``level_db`` is the background's: more than ``speaker_margin_db`` under the speaker's level
    and, with a floor margin (not None), less than ``floor_margin_db`` over the background's floor. An unknown (NaN)
    level never is, nor anything before the speaker's level is known (None); an unknown floor (None or NaN) reads
    as ``unknown_floor``. The endpoint's frames, the louder talker's check and the words dropped all judge by it."""
    if speaker_db is None or not level_db < speaker_db - speaker_margin_db:  # a NaN level compares False
        return False
    if floor_margin_db is None:
        return True
    if floor_db is None or math.isnan(floor_db):
        return unknown_floor
    return level_db < floor_db + floor_margin_db


def louder_talker_started(heard_db: list[float], floor_db: list[float], frames: int, speaker_db: float | None,
                          speaker_margin_db: float, floor_margin_db: float | None, min_before_frames: float) -> bool:
    """Whether the last ``frames`` of an utterance's frames (``heard_db``, the levels the search judged, and
    ``floor_db``, the floor then; NaN: unknown) are a talker louder than all before them: heard more than the
    speaker's margin over the speaker's level before them (``speaker_db``), and every earlier frame background by
    that louder level (a frame before the floor is known by its level alone). The talk the stream started on was
    not the speaker.

    The speaker returning is such a talker too: heard at the speaker's level (not the margin under it) after at
    least ``min_before_frames`` (more than a VAD segment's own pad) of frames the margin under it. After a sentence
    the stream's next utterance may start on talk behind the speaker, and the recognizer reads words in it before
    the speaker's next sentence.

    Before the recognizer has emitted anything there is no speaker's level (None): a stream that starts on talk
    the recognizer reads no word in has only that talk in the attention's reach when the speaker starts. Then at
    least ``min_before_frames`` earlier frames, each the margin under the last ones, are the test alone."""
    loudest = max((h for h in heard_db[-frames:] if not math.isnan(h)), default=None)
    before = len(heard_db) - frames
    if loudest is None or before <= 0:
        return False
    louder = speaker_db is not None and loudest >= speaker_db + speaker_margin_db
    if not louder:
        returning = speaker_db is None or loudest >= speaker_db - speaker_margin_db
        if not returning or before < min_before_frames - 1e-9:
            return False
    return all(is_background_level(h, loudest, speaker_margin_db, f, floor_margin_db, unknown_floor=True)
               for h, f in zip(heard_db[:before], floor_db[:before]))


class SpeakerLevel:
    """The speaker's level in dB: the loudest frame the recognizer emitted on (a non-blank frame within the
    margin), falling by ``decay_db_s`` a second; None until the first such frame."""

    def __init__(self, margin_db: float, decay_db_s: float, frame_s: float) -> None:
        self.margin_db = margin_db
        self._decay = decay_db_s * frame_s  # dB a frame
        self.level_db: float | None = None

    def is_background(self, level_db: float) -> bool:
        """A frame this quiet is not the speaker (an unknown, NaN level never is)."""
        return is_background_level(level_db, self.level_db, self.margin_db, None, None)

    def update(self, level_db: float, emitted: bool) -> None:
        """One frame: the level falls by a frame's decay, and rises to a louder frame the recognizer emitted on."""
        if self.level_db is not None:
            self.level_db -= self._decay
        if emitted and not math.isnan(level_db) and not self.is_background(level_db):
            self.level_db = level_db if self.level_db is None else max(self.level_db, level_db)


class BackgroundFloor:
    """The background's level in dB: the quietest audio heard (each frame's surrounding level), rising by
    ``rise_db_s`` a second while all is louder; None until the first known level. A dip more than ``DEEP_DIP_DB``
    under the floor lowers it only once it lasted ``hold_s`` (to the loudest of that stretch): talk behind a speaker
    pauses, three voices fall silent together for a breath, and a floor that fell to that breath would put their
    next words 40 dB over it, where a quieter sentence of a quiet room lies. Digital silence counts as
    ``QUIETEST_DB``, so a floor that started on it can rise to a background that starts later."""

    QUIETEST_DB = -100.0
    DEEP_DIP_DB = 10.0  # the frame rules' floor margin: a shallower dip moves no judgement by much

    def __init__(self, rise_db_s: float, frame_s: float, hold_s: float = 0.0) -> None:
        self._rise = rise_db_s * frame_s  # dB a frame
        self._recent: deque[float] = deque(maxlen=max(1, round(hold_s / frame_s)))  # the last hold_s of levels
        self.level_db: float | None = None

    def update(self, level_db: float) -> None:
        """One frame's surrounding level: the floor rises by a frame's rise, and falls to a quieter level (a deep
        dip: to the loudest of the last ``hold_s``)."""
        if math.isnan(level_db):
            return
        level_db = max(level_db, self.QUIETEST_DB)
        self._recent.append(level_db)
        if self.level_db is not None and level_db < self.level_db - self.DEEP_DIP_DB:
            level_db = max(self._recent)
        self.level_db = level_db if self.level_db is None else min(self.level_db + self._rise, level_db)
