"""Words of the background: a word-level decision beside the endpoint's frame-level one
(:mod:`asr.decode.endpoint`).

The frame-level rule blanks a frame when its audio is far under the speaker's level and near the
background's floor. It judges each frame by the audio heard up to its chunk's end, against the
speaker's level of the whole stream, so the background's words stay where that level is not set yet
(a stream that starts on talk) or where a word's frames reach past the floor's margin. A word is
judged on more: all its frames, and the loudest word of its own utterance, which is the speaker when
the speaker spoke in it. Talk 20 dB under a speaker peaks 15-20 dB under the speaker's words and lies
on the floor it sets itself; a quieter sentence sets the loudest word of its own utterance, so none of
its words is far under it.

A word (the frames its tokens are emitted on, :func:`~asr.serve.timestamps.ctc_align`) is the
background's when its level (the loudest of those frames' heard levels: the audio around each frame
and the rest of its chunk, as the search hears it) is more than ``speaker_margin_db`` under the
loudest word of the hypothesis and within ``floor_margin_db`` over the floor at its first frame. The
decision uses the frames decoded so far: a partial's words are judged against the words before them,
a final's against all of the utterance's.

Axis legend: U tokens of a hypothesis, T' encoder frames of the utterance.
"""

from __future__ import annotations

import math

import numpy as np

from asr.decode.levels import is_background_level
from asr.lm.words import WORD_MARKER


def word_groups(pieces: list[str]) -> list[list[int]]:
    """Token indices of each word of U ``pieces`` (a piece that starts with "▁" starts a word, as
    :func:`~asr.serve.timestamps.word_times` groups them). Pieces with no text (a bare "▁", a special the
    tokenizer leaves out) join the word after them, or the last one."""
    groups: list[list[int]] = []
    current: list[int] = []
    has_text = False
    for index, piece in enumerate(pieces):
        if piece.startswith(WORD_MARKER) and has_text:
            groups.append(current)
            current, has_text = [], False
        current.append(index)
        has_text = has_text or bool(piece.lstrip(WORD_MARKER))
    if current:
        if has_text or not groups:
            groups.append(current)
        else:
            groups[-1] += current
    return groups


def background_words(pieces: list[str], spans: list[tuple[int, int]], heard_db: np.ndarray, floor_db: np.ndarray,
                     speaker_margin_db: float, floor_margin_db: float) -> list[bool]:
    """Per word of a hypothesis (:func:`word_groups`): the background's (see the module docstring).

    Args:
        pieces: U token pieces.
        spans: U (first frame, last frame + 1) where the CTC path emits each token (utterance frames).
        heard_db: (T',) each frame's heard level in dB (NaN: unknown).
        floor_db: (T',) the background's floor at each frame in dB (NaN: none yet).
        speaker_margin_db, floor_margin_db: the margins (``asr.decode.endpoint.EndpointConfig``'s).
    """
    if len(pieces) != len(spans):
        raise ValueError(f"{len(pieces)} pieces but {len(spans)} spans.")
    heard_db, floor_db = np.asarray(heard_db, dtype=np.float64), np.asarray(floor_db, dtype=np.float64)
    if heard_db.shape != floor_db.shape or heard_db.ndim != 1:
        raise ValueError(f"heard_db {heard_db.shape} and floor_db {floor_db.shape} must be the same (T',).")
    levels, floors = [], []
    for group in word_groups(pieces):
        first, last = spans[group[0]][0], spans[group[-1]][1]
        frames = heard_db[first:last]
        known = frames[~np.isnan(frames)]
        levels.append(float(known.max()) if known.size else math.nan)
        floors.append(float(floor_db[first]) if first < floor_db.size else math.nan)
    known = [level for level in levels if not math.isnan(level)]
    if not known:
        return [False] * len(levels)
    loudest = max(known)
    return [is_background_level(level, loudest, speaker_margin_db, floor, floor_margin_db)
            for level, floor in zip(levels, floors)]


def without_words(tokens: list[int], pieces: list[str], spans: list[tuple[int, int]], drop: list[bool]
                  ) -> tuple[list[int], list[str], list[tuple[int, int]]]:
    """``tokens``, ``pieces`` and ``spans`` (U each) without the tokens of the words ``drop`` marks (one flag per
    word of :func:`word_groups`)."""
    groups = word_groups(pieces)
    if len(drop) != len(groups):
        raise ValueError(f"{len(drop)} flags for {len(groups)} words.")
    keep = [i for group, dropped in zip(groups, drop) if not dropped for i in group]
    return [tokens[i] for i in keep], [pieces[i] for i in keep], [spans[i] for i in keep]
