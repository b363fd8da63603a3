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

import torch

NEG_INF = float("-inf")
WORD_START = "\u2581"  # "▁"


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
    lp = log_probs.detach().double().cpu()
    frames = lp.size(0)
    labels = torch.full((2 * len(tokens) + 1,), blank_id, dtype=torch.long)
    labels[1::2] = torch.tensor(tokens, dtype=torch.long)  # (S,)
    states = labels.numel()
    # A token state may skip the blank before it unless it repeats the previous token.
    can_skip = torch.zeros(states, dtype=torch.bool)
    can_skip[3::2] = labels[3::2] != labels[1:-2:2]
    emit = lp[:, labels]  # (T', S)
    score = torch.full((states,), NEG_INF, dtype=torch.float64)
    score[0] = emit[0, 0]
    if states > 1:
        score[1] = emit[0, 1]
    back = torch.zeros(frames, states, dtype=torch.long)  # predecessor state per frame
    index = torch.arange(states)
    for t in range(1, frames):
        stay = score
        step = torch.cat([score.new_full((1,), NEG_INF), score[:-1]])
        skip = torch.cat([score.new_full((2,), NEG_INF), score[:-2]]).masked_fill(~can_skip, NEG_INF)
        best, choice = torch.stack([stay, step, skip]).max(dim=0)  # (S,) each
        back[t] = index - choice
        score = best + emit[t]
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
    text, first, last = "", None, None
    for piece, (a, b) in zip(pieces, spans):
        if piece.startswith(WORD_START) and text:
            words.append(Word(text, offset_s + first * frame_s, offset_s + last * frame_s))
            text, first = "", None
        body = piece.lstrip(WORD_START)
        if body:
            text += body
            first = a if first is None else first
            last = b
    if text:
        words.append(Word(text, offset_s + first * frame_s, offset_s + last * frame_s))
    return words
