"""Biased and unbiased word error rates (Le et al. 2021, "Contextualized streaming end-to-end speech
recognition with trie-based deep biasing and shallow fusion").

Each utterance has a biasing list. After a minimum edit-distance alignment of reference and
hypothesis words:

- a substituted or deleted reference word is a B error if it is in the utterance's list, else a U
  error; an inserted word is a B error if it is in the list, else a U error;
- B-WER = B errors / reference words in the list; U-WER = U errors / the other reference words;
  WER = all errors / all reference words (the same as ``asr.decode.wer``'s).

The "biased" reference words are those of the list that the reference holds (its rare words), so a
list's distractors never raise the B-WER denominator.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

MATCH, SUB, DEL, INS = "=", "S", "D", "I"


def align(ref: Sequence[str], hyp: Sequence[str]) -> list[tuple[str, str | None, str | None]]:
    """A minimum edit-distance alignment: (op, ref word or None, hyp word or None) in order.

    Ties prefer a match or substitution over a deletion over an insertion, so the alignment is unique.
    """
    n, m = len(ref), len(hyp)
    cost = [[0] * (m + 1) for _ in range(n + 1)]  # (n+1, m+1) edit distances of prefixes
    for i in range(1, n + 1):
        cost[i][0] = i
    for j in range(1, m + 1):
        cost[0][j] = j
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            diag = cost[i - 1][j - 1] + (ref[i - 1] != hyp[j - 1])
            cost[i][j] = min(diag, cost[i - 1][j] + 1, cost[i][j - 1] + 1)
    ops = []
    i, j = n, m
    while i > 0 or j > 0:
        if i > 0 and j > 0 and cost[i][j] == cost[i - 1][j - 1] + (ref[i - 1] != hyp[j - 1]):
            ops.append((MATCH if ref[i - 1] == hyp[j - 1] else SUB, ref[i - 1], hyp[j - 1]))
            i, j = i - 1, j - 1
        elif i > 0 and cost[i][j] == cost[i - 1][j] + 1:
            ops.append((DEL, ref[i - 1], None))
            i -= 1
        else:
            ops.append((INS, None, hyp[j - 1]))
            j -= 1
    return ops[::-1]


class BiasedErrorCounter:
    """Accumulates WER, U-WER and B-WER over utterances (see the module docstring)."""

    def __init__(self) -> None:
        self.ref_words = self.biased_words = 0
        self.u_errors = self.b_errors = 0
        self.utterances = 0

    def add(self, ref: str, hyp: str, biasing_list: Collection[str]) -> dict:
        """Score one utterance against its list; returns its counts."""
        words = set(biasing_list)
        ref_w, hyp_w = ref.split(), hyp.split()
        u = b = 0
        for op, r, h in align(ref_w, hyp_w):
            if op in (SUB, DEL):
                b, u = (b + 1, u) if r in words else (b, u + 1)
            elif op == INS:
                b, u = (b + 1, u) if h in words else (b, u + 1)
        biased = sum(w in words for w in ref_w)
        self.utterances += 1
        self.ref_words += len(ref_w)
        self.biased_words += biased
        self.u_errors += u
        self.b_errors += b
        return {"u_errors": u, "b_errors": b, "ref_words": len(ref_w), "biased_words": biased}

    @staticmethod
    def _rate(errors: int, total: int) -> float:
        return errors / total if total else (0.0 if errors == 0 else float("inf"))

    @property
    def wer(self) -> float:
        return self._rate(self.u_errors + self.b_errors, self.ref_words)

    @property
    def u_wer(self) -> float:
        return self._rate(self.u_errors, self.ref_words - self.biased_words)

    @property
    def b_wer(self) -> float:
        return self._rate(self.b_errors, self.biased_words)

    def summary(self) -> dict:
        return {"utterances": self.utterances, "ref_words": self.ref_words, "biased_words": self.biased_words,
                "u_errors": self.u_errors, "b_errors": self.b_errors, "wer": self.wer, "u_wer": self.u_wer,
                "b_wer": self.b_wer}
