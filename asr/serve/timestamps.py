"""Word timestamps from the CTC alignment of a hypothesis.

Axis legend: T' encoder frames, V vocab, U tokens, S = 2U + 1 alignment states
(blank, token 1, blank, token 2, ..., blank).

:func:`ctc_align` is the Viterbi (best single path) forced alignment of a token
sequence; :func:`word_times` groups the tokens into words ("▁" starts a word, as in
sentencepiece and the char units) and gives each word the frames from the first
frame of its first token to the end of the last frame of its last token.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from asr.decode.background_words import word_groups
from asr.lm.words import WORD_MARKER

NEG_INF = float("-inf")


@dataclass(frozen=True)
class Word:
    """A word and its time span in seconds of stream time."""

    word: str
    start: float
    end: float


def ctc_align(log_probs: torch.Tensor, tokens: list[int], blank_id: int = 0) -> list[tuple[int, int]]:
    """Best CTC path for ``tokens``; each token's frame span.

    Args:
        log_probs: (T', V) CTC log-probabilities.
        tokens: U token ids (no blanks).
    Returns:
        U pairs (first frame, last frame + 1) where the path emits each token.
    Raises:
        ValueError: the tokens need more frames than there are (repeats need a blank between).
    """
    if log_probs.dim() != 2:
        raise ValueError(f"log_probs must be (T', V), got shape {tuple(log_probs.shape)}.")
    if not tokens:
        return []
    # numpy, not torch: the recursion runs once per frame on S-element vectors, where
    # torch's per-op overhead dominated (a final result spent 26% of a serving round here).
    lp = log_probs.detach().double().cpu().numpy()
    frames = lp.shape[0]
    labels = np.full(2 * len(tokens) + 1, blank_id, dtype=np.int64)
    labels[1::2] = tokens  # (S,)
    states = labels.size
    # A token state may skip the blank before it unless it repeats the previous token.
    cannot_skip = np.ones(states, dtype=bool)
    cannot_skip[3::2] = labels[3::2] == labels[1:-2:2]
    emit = lp[:, labels]  # (T', S)
    score = np.full(states, NEG_INF)
    score[0] = emit[0, 0]
    if states > 1:
        score[1] = emit[0, 1]
    back = np.zeros((frames, states), dtype=np.int64)  # predecessor state per frame
    index = np.arange(states)
    moves = np.full((3, states), NEG_INF)  # stay, step from s-1, skip from s-2
    for t in range(1, frames):
        moves[0] = score
        moves[1, 1:] = score[:-1]
        moves[2, 2:] = score[:-2]
        moves[2, cannot_skip] = NEG_INF
        choice = moves.argmax(axis=0)  # first maximum: stay before step before skip, as before
        back[t] = index - choice
        score = moves[choice, index] + emit[t]
    last = states - 1 if states == 1 or score[-1] >= score[-2] else states - 2
    if score[last] == NEG_INF:
        raise ValueError(f"{len(tokens)} tokens cannot be aligned to {frames} frames.")
    path = [last]
    for t in range(frames - 1, 0, -1):
        path.append(int(back[t, path[-1]]))
    path.reverse()  # state per frame
    spans: list[list[int]] = [[-1, -1] for _ in tokens]
    for t, s in enumerate(path):
        if s % 2 == 1:
            u = s // 2
            if spans[u][0] < 0:
                spans[u][0] = t
            spans[u][1] = t + 1
    return [(a, b) for a, b in spans]


def word_times(
    pieces: list[str], spans: list[tuple[int, int]], frame_s: float, offset_s: float = 0.0
) -> list[Word]:
    """Group token pieces into words with times.

    Args:
        pieces: U token strings; a leading "▁" starts a new word ("▁" alone is a space).
        spans: U (first frame, last frame + 1) from :func:`ctc_align`.
        frame_s: seconds per encoder frame.
        offset_s: stream time of frame 0 (continuous decoding).
    """
    if len(pieces) != len(spans):
        raise ValueError(f"{len(pieces)} pieces but {len(spans)} spans.")
    words: list[Word] = []
    for group in word_groups(pieces):
        spelled = [i for i in group if pieces[i].lstrip(WORD_MARKER)]  # a bare "▁" has no text and no time
        if spelled:
            text = "".join(pieces[i].lstrip(WORD_MARKER) for i in spelled)
            first, last = spans[spelled[0]][0], spans[spelled[-1]][1]
            words.append(Word(text, offset_s + first * frame_s, offset_s + last * frame_s))
    return words
