"""Context graph for hotword biasing: an Aho-Corasick automaton over the ASR model's own token ids.

Axis legend: U tokens of a hypothesis.

What a hypothesis y (token ids) is worth, once complete:

    final(y) = sum over every occurrence of a phrase p in y of |p| * score(p)

(overlapping and nested occurrences all count: "new york" inside "new york city" earns its own bonus
beside the longer phrase's). While y is still growing, the searches need a score that already pays
for a phrase being spelled, so the beam keeps it alive until it completes. That *provisional* part is

    potential(y) = |s| * max{score(p) : s is a proper prefix of p}

for s the longest suffix of y that is a proper prefix of some phrase (0 when there is none). The
running score of a prefix is ``final(prefix) + potential(prefix)``: each matched token moves it up,
a token that breaks the match takes back what the broken part had earned (the automaton's fail arc
falls to the longest suffix that still matches, which keeps its own share), and :meth:`finish` takes
back what is left at the end of the utterance, so a hypothesis that never completes a phrase ends
exactly where it would without biasing. A completed phrase keeps its bonus.

The automaton's states are the trie nodes that are proper prefixes of a phrase (the root included);
a trie leaf is never a state, since nothing can follow it, so it collapses to its first fail
ancestor with children. :meth:`step` follows goto and fail arcs and memoizes the result per
(state, token), so a beam pays one dict lookup per extension after the first.

Pure Python, like the searches that use it.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence

ROOT = 0
MEMO_ENTRIES = 200_000  # memoized transitions kept per graph (~30 MB); cleared when full, like the LM caches


def check_unbiased_keep(value: int | None, what: str = "unbiased_keep") -> int | None:
    """``value`` when it is None (the search's default) or a count >= 0; else ValueError naming ``what``.

    The one check for every place that takes this setting (graph, search, hotword compiler,
    recognizer), so a bad value is refused where it enters, with the same message."""
    if value is not None and value < 0:
        raise ValueError(f"{what} ({value}) must be >= 0 (or None: the default).")
    return value


class ContextGraph:
    """Aho-Corasick over token-id phrases with per-phrase scores (see the module docstring).

    Args:
        phrases: (token ids, score per token) pairs; the ids are the ASR model's. Empty phrases
            are refused; a phrase given twice keeps its highest score.
        provisional: share of the bonus a phrase being spelled holds before it completes (the potential
            is scaled by it; a completed phrase always keeps its whole bonus). Below 1 the beam is pulled
            less towards the beginnings of phrases that are not there.
        unbiased_keep: how many prefixes a search biased by this graph keeps on their unbiased score beside
            its beam (``asr.decode.ctc_prefix_beam``); None: the search's default. It travels with the
            graph so that every search a compiled list reaches (decode, stream, each server connection)
            applies the same setting.
    """

    def __init__(self, phrases: Iterable[tuple[Sequence[int], float]], provisional: float = 1.0,
                 unbiased_keep: int | None = None) -> None:
        if not (math.isfinite(provisional) and 0.0 <= provisional <= 1.0):
            raise ValueError(f"provisional ({provisional}) must lie in [0, 1]")
        self.unbiased_keep = check_unbiased_keep(unbiased_keep)
        best: dict[tuple[int, ...], float] = {}
        for tokens, score in phrases:
            tokens = tuple(int(t) for t in tokens)
            if not tokens:
                raise ValueError("a context phrase needs at least one token")
            if not math.isfinite(score):
                raise ValueError(f"phrase score ({score}) must be finite")
            best[tokens] = max(score, best.get(tokens, -math.inf))
        self.phrases = best
        # Trie: per node its children, depth, own phrase bonus and the best score of a longer phrase.
        self._children: list[dict[int, int]] = [{}]
        self._depth = [0]
        own = [0.0]
        ahead = [-math.inf]  # max score over phrases this node is a proper prefix of
        for tokens, score in best.items():
            node = ROOT
            for tok in tokens:
                ahead[node] = max(ahead[node], score)
                nxt = self._children[node].get(tok)
                if nxt is None:
                    nxt = len(self._children)
                    self._children[node][tok] = nxt
                    self._children.append({})
                    self._depth.append(self._depth[node] + 1)
                    own.append(0.0)
                    ahead.append(-math.inf)
                node = nxt
            own[node] = len(tokens) * score
        n = len(self._children)
        # Provisional bonus of being at a node: depth * best score ahead (0 at the root and at leaves).
        self._potential = [provisional * self._depth[i] * ahead[i] if self._children[i] else 0.0 for i in range(n)]
        self._potential[ROOT] = 0.0
        # Fail arcs and output sums in breadth-first order (a node's fail is shallower, so done first).
        self._fail = [ROOT] * n
        self._output = list(own)  # sum of the bonuses of every phrase that is a suffix of the node's string
        self._state = list(range(n))  # the node itself, or for a leaf its first fail ancestor with children
        queue = deque(self._children[ROOT].values())
        order = []
        while queue:
            node = queue.popleft()
            order.append(node)
            for tok, child in self._children[node].items():
                fail = self._fail[node]
                while tok not in self._children[fail] and fail != ROOT:
                    fail = self._fail[fail]
                target = self._children[fail].get(tok, ROOT)
                self._fail[child] = target if target != child else ROOT
                queue.append(child)
        for node in order:
            fail = self._fail[node]
            self._output[node] += self._output[fail]
            if not self._children[node]:
                self._state[node] = self._state[fail]
        self._memo: dict[tuple[int, int], tuple[int, float]] = {}

    @property
    def num_states(self) -> int:
        """Trie nodes (the root included)."""
        return len(self._children)

    def potential(self, state: int) -> float:
        """The provisional bonus a hypothesis in ``state`` holds (what :meth:`finish` takes back)."""
        return self._potential[state]

    def step(self, state: int, token: int) -> tuple[int, float]:
        """(next state, score change) for appending ``token`` to a hypothesis in ``state``.

        The change is the bonus of every phrase the token completes, plus the potential of the
        next state, minus the potential of ``state``.
        """
        key = (state, token)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        node = state
        children = self._children
        while token not in children[node] and node != ROOT:
            node = self._fail[node]
        target = children[node].get(token, ROOT)
        nxt = self._state[target]
        result = (nxt, self._output[target] + self._potential[nxt] - self._potential[state])
        if len(self._memo) >= MEMO_ENTRIES:
            self._memo.clear()
        self._memo[key] = result
        return result

    def finish(self, state: int) -> float:
        """The score change at the end of the utterance: the provisional bonus of ``state`` taken back."""
        return -self._potential[state]

    def walk(self, tokens: Sequence[int], state: int = ROOT) -> tuple[int, float]:
        """(state, summed score changes) after ``tokens`` from ``state`` (no end term)."""
        total = 0.0
        for tok in tokens:
            state, gain = self.step(state, tok)
            total += gain
        return state, total

    def sentence_score(self, tokens: Sequence[int]) -> float:
        """``final(tokens)``: what a complete hypothesis keeps (the bonuses of the phrases it holds)."""
        state, total = self.walk(tokens)
        return total + self.finish(state)
