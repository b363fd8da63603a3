"""CTC prefix beam search, one-shot and incremental (chunk by chunk).

Axis legend: T' encoder frames, V vocab.

Each prefix keeps two log-probabilities over the frames seen so far: ``pb``
(alignments ending in blank) and ``pnb`` (ending in the prefix's last token).
Without pruning these are exact sums over alignments, so the score of a
prefix after the last frame is log P(prefix | x). Pruning keeps the ``beam``
best tokens per frame and the ``beam`` best prefixes after each frame; with
beam 1 this reduces to greedy CTC decoding.
"""

from __future__ import annotations

import math

import torch

NEG_INF = float("-inf")


def _logaddexp(a: float, b: float) -> float:
    if a == NEG_INF:
        return b
    if b == NEG_INF:
        return a
    hi, lo = (a, b) if a > b else (b, a)
    return hi + math.log1p(math.exp(lo - hi))


class CtcPrefixBeamSearch:
    """Incremental CTC prefix beam search.

    Feed frames with :meth:`advance` in any pieces; the result after all frames
    is the same as one call with every frame (the search is frame-synchronous).

    Args:
        beam: prefixes kept after each frame and tokens tried per frame (>= 1).
        blank_id: CTC blank.
    """

    def __init__(self, beam: int, blank_id: int = 0) -> None:
        if beam < 1:
            raise ValueError(f"beam ({beam}) must be >= 1.")
        self.beam = beam
        self.blank_id = blank_id
        self.reset()

    def reset(self) -> None:
        """Forget every frame seen: back to the empty prefix with probability 1."""
        # prefix -> (pb, pnb)
        self._beams: dict[tuple[int, ...], tuple[float, float]] = {(): (0.0, NEG_INF)}
        self.num_frames = 0

    def advance(self, log_probs: torch.Tensor) -> None:
        """Consume t more frames.

        Args:
            log_probs: (t, V) CTC log-probabilities; t may be 0.
        """
        if log_probs.dim() != 2:
            raise ValueError(f"log_probs must be (t, V), got shape {tuple(log_probs.shape)}.")
        if log_probs.shape[0] == 0:
            return
        k = min(self.beam, log_probs.shape[1])
        top_lp, top_ids = log_probs.detach().double().topk(k, dim=-1)  # (t, k)
        for frame_lp, frame_ids in zip(top_lp.tolist(), top_ids.tolist()):
            self._step(frame_lp, frame_ids)
        self.num_frames += log_probs.shape[0]

    def _step(self, frame_lp: list[float], frame_ids: list[int]) -> None:
        nxt: dict[tuple[int, ...], list[float]] = {}

        def add(prefix: tuple[int, ...], pb: float = NEG_INF, pnb: float = NEG_INF) -> None:
            cur = nxt.get(prefix)
            if cur is None:
                nxt[prefix] = [pb, pnb]
            else:
                cur[0] = _logaddexp(cur[0], pb)
                cur[1] = _logaddexp(cur[1], pnb)

        for prefix, (pb, pnb) in self._beams.items():
            total = _logaddexp(pb, pnb)
            last = prefix[-1] if prefix else None
            for lp, tok in zip(frame_lp, frame_ids):
                if tok == self.blank_id:
                    add(prefix, pb=total + lp)
                elif tok == last:
                    # Repeat without a blank in between merges into the same token ...
                    add(prefix, pnb=pnb + lp)
                    # ... a blank in between makes it a new token.
                    add(prefix + (tok,), pnb=pb + lp)
                else:
                    add(prefix + (tok,), pnb=total + lp)
        scored = [(_logaddexp(pb, pnb), prefix, pb, pnb) for prefix, (pb, pnb) in nxt.items()]
        # Impossible prefixes (a repeat right after a non-blank with pb = -inf) never enter the beam.
        scored = [s for s in scored if s[0] > NEG_INF]
        scored.sort(key=lambda s: s[0], reverse=True)
        self._beams = {prefix: (pb, pnb) for _, prefix, pb, pnb in scored[: self.beam]}

    def nbest(self) -> list[tuple[list[int], float]]:
        """Current prefixes with their log-probabilities, best first."""
        scored = [(list(p), _logaddexp(pb, pnb)) for p, (pb, pnb) in self._beams.items()]
        scored.sort(key=lambda x: x[1], reverse=True)
        return scored

    def best(self) -> list[int]:
        """Best prefix so far (the partial hypothesis while streaming)."""
        ranked = self.nbest()
        return ranked[0][0] if ranked else []


def ctc_prefix_beam_search(
    log_probs: torch.Tensor, beam: int, blank_id: int = 0
) -> list[tuple[list[int], float]]:
    """One-shot CTC prefix beam search over (T', V) log-probabilities.

    Returns:
        up to ``beam`` (tokens, log-probability) pairs, best first.
    """
    search = CtcPrefixBeamSearch(beam, blank_id)
    search.advance(log_probs)
    return search.nbest()
