"""CTC prefix beam search, one-shot and incremental (chunk by chunk).

Axis legend: T' encoder frames, V vocab.

Each prefix keeps two log-probabilities over the frames seen so far: ``pb``
(alignments ending in blank) and ``pnb`` (ending in the prefix's last token).
Without pruning these are exact sums over alignments, so the score of a
prefix after the last frame is log P(prefix | x). Pruning keeps the ``beam``
best tokens per frame and the ``beam`` best prefixes after each frame; with
beam 1 this reduces to greedy CTC decoding.

Prefixes are ranked by CTC plus, when given, the language models' fusion score and the
hotword context graph's running score (``asr.decode.context_graph``): the provisional bonus of a
phrase being spelled counts while the prefix grows and is taken back in complete rankings
(:meth:`CtcPrefixBeamSearch.nbest`) unless the phrase was completed.

With a context graph the beam can also reserve room for what was said without biasing
(``unbiased_keep``): besides the ``beam`` best prefixes on the biased ranking, the best
``unbiased_keep`` on CTC plus fusion alone survive each frame. Why: with a long list, the
provisional bonuses of many phrase beginnings can fill the whole beam with prefixes that later
fail; their bonus is taken back at the end, but the prefix that was said may have been pruned
on the way, and what remains is a false alarm or a mangled word.
"""

from __future__ import annotations

import heapq
import math

import torch

from asr.decode.context_graph import ROOT, ContextGraph, check_unbiased_keep
from asr.lm.fusion import Fusion

NEG_INF = float("-inf")
# Prefixes kept on their unbiased score beside the beam when a context graph biases it (None asks for this).
# With a long list the provisional bonuses of phrase beginnings can fill the beam and prune what was said;
# 20 unbiased rivals bring false alarms back to the unbiased WER on biasing_dev, for about twice the
# search's CPU (data/results/hotwords_lm.md).
DEFAULT_UNBIASED_KEEP = 20


def unbiased_keep_for(context: ContextGraph | None, unbiased_keep: int | None = None) -> int:
    """The room a search biased by ``context`` keeps for unbiased prefixes: ``unbiased_keep`` when given,
    else the graph's own setting, else :data:`DEFAULT_UNBIASED_KEEP`."""
    if unbiased_keep is None:
        unbiased_keep = getattr(context, "unbiased_keep", None)
    return DEFAULT_UNBIASED_KEEP if unbiased_keep is None else unbiased_keep


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
        fusion: a language model to rank prefixes with (None: CTC alone).
        context: a hotword context graph to bias the ranking with (None: no biasing).
        unbiased_keep: with ``context``, prefixes kept after each frame on their unbiased score
            (CTC plus fusion) besides the ``beam`` best biased ones (the module docstring); None: the
            graph's own setting (``ContextGraph.unbiased_keep``), else :data:`DEFAULT_UNBIASED_KEEP`.
    """

    def __init__(self, beam: int, blank_id: int = 0, fusion: Fusion | None = None,
                 context: ContextGraph | None = None, unbiased_keep: int | None = None) -> None:
        if beam < 1:
            raise ValueError(f"beam ({beam}) must be >= 1.")
        unbiased_keep = check_unbiased_keep(unbiased_keep_for(context, unbiased_keep))
        # An empty graph biases nothing, so it changes nothing (no extra prefixes either).
        self.unbiased_keep = unbiased_keep if context is not None and context.phrases else 0
        self.beam = beam
        self.blank_id = blank_id
        self.fusion = fusion
        self.context = context
        self.reset()

    def reset(self) -> None:
        """Forget every frame seen: back to the empty prefix with probability 1."""
        # prefix -> (pb, pnb, fusion score of its tokens, context state, context score; 0 without them)
        self._beams: dict[tuple[int, ...], tuple[float, float, float, int, float]] = {
            (): (0.0, NEG_INF, 0.0, ROOT, 0.0)}
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
        # The top k first, then float64: the whole (t, V) in float64 is 8 bytes a logit, a second copy of a
        # long recording's log-probabilities (the conversion is exact, so the same k are kept).
        top_lp, top_ids = log_probs.detach().topk(k, dim=-1)  # (t, k)
        top_lp = top_lp.double()
        for frame_lp, frame_ids in zip(top_lp.tolist(), top_ids.tolist()):
            self._step(frame_lp, frame_ids)
        self.num_frames += log_probs.shape[0]

    def _step(self, frame_lp: list[float], frame_ids: list[int]) -> None:
        nxt: dict[tuple[int, ...], list] = {}
        fusion, context = self.fusion, self.context
        context_step = context.step if context is not None else None

        def add(prefix: tuple[int, ...], lm: float, ctx: int, bias: float, pb: float = NEG_INF,
                pnb: float = NEG_INF) -> None:
            cur = nxt.get(prefix)
            if cur is None:
                nxt[prefix] = [pb, pnb, lm, ctx, bias]
            else:
                cur[0] = _logaddexp(cur[0], pb)
                cur[1] = _logaddexp(cur[1], pnb)

        for prefix, (pb, pnb, lm, ctx, bias) in self._beams.items():
            total = _logaddexp(pb, pnb)
            last = prefix[-1] if prefix else None
            for lp, tok in zip(frame_lp, frame_ids):
                if tok == self.blank_id:
                    add(prefix, lm, ctx, bias, pb=total + lp)
                    continue
                # fusion and context scores depend on the prefix alone, so merged paths share them
                longer_lm = lm + fusion.token_score(prefix, tok) if fusion is not None else 0.0
                if context_step is not None:
                    longer_ctx, gain = context_step(ctx, tok)
                    longer_bias = bias + gain
                else:
                    longer_ctx, longer_bias = ROOT, 0.0
                if tok == last:
                    # Repeat without a blank in between merges into the same token ...
                    add(prefix, lm, ctx, bias, pnb=pnb + lp)
                    # ... a blank in between makes it a new token.
                    add(prefix + (tok,), longer_lm, longer_ctx, longer_bias, pnb=pb + lp)
                else:
                    add(prefix + (tok,), longer_lm, longer_ctx, longer_bias, pnb=total + lp)
        scored = [(_logaddexp(v[0], v[1]), prefix, v) for prefix, v in nxt.items()]
        # Impossible prefixes (a repeat right after a non-blank with pb = -inf) never enter the beam.
        scored = [s for s in scored if s[0] > NEG_INF]
        scored.sort(key=lambda s: s[0] + s[2][2] + s[2][4], reverse=True)
        kept = scored[: self.beam]
        if self.unbiased_keep and len(scored) > self.beam:
            # The best prefixes without the hotword bonus, where the biased ranking dropped them.
            unbiased = heapq.nlargest(self.unbiased_keep, scored, key=lambda s: s[0] + s[2][2])
            chosen = {prefix for _, prefix, _ in kept}
            kept += [s for s in unbiased if s[1] not in chosen]
        self._beams = {prefix: tuple(v) for _, prefix, v in kept}

    def nbest(self, complete: bool = True) -> list[tuple[list[int], float]]:
        """Current prefixes with their CTC log-probabilities, best first (by CTC plus fusion when fused).

        Args:
            complete: rank them as whole sentences, the LM's end-of-sentence term included and the
                provisional hotword bonus of unfinished phrases taken back (what a final result needs);
                False ranks them as prefixes still going on (partial results while streaming). Without
                fusion and context both rankings are the CTC one.
        """
        ranked = []
        for prefix, (pb, pnb, lm, ctx, bias) in self._beams.items():
            ctc = _logaddexp(pb, pnb)
            fused = ctc
            if self.fusion is not None:
                fused += lm + (self.fusion.end_score(prefix) if complete else 0.0)
            if self.context is not None:
                fused += bias + (self.context.finish(ctx) if complete else 0.0)
            ranked.append((fused, list(prefix), ctc))
        ranked.sort(key=lambda x: x[0], reverse=True)
        return [(prefix, ctc) for _, prefix, ctc in ranked]

    def best(self) -> list[int]:
        """Best prefix so far as a prefix (no end-of-sentence term): the partial hypothesis while streaming."""
        ranked = self.nbest(complete=False)
        return ranked[0][0] if ranked else []


def ctc_prefix_beam_search(
    log_probs: torch.Tensor, beam: int, blank_id: int = 0, fusion: Fusion | None = None,
    context: ContextGraph | None = None, unbiased_keep: int | None = None,
) -> list[tuple[list[int], float]]:
    """One-shot CTC prefix beam search over (T', V) log-probabilities.

    Returns:
        up to ``beam`` (+ ``unbiased_keep`` with a context graph) (tokens, CTC log-probability)
        pairs, best first.
    """
    search = CtcPrefixBeamSearch(beam, blank_id, fusion, context, unbiased_keep)
    search.advance(log_probs)
    return search.nbest()
