"""Substitutions, deletions and insertions of a hypothesis against its reference (what Kaldi's
``compute-wer`` and sclite print beside a WER).

A minimum edit-distance alignment fixes their sum (the word errors); among the alignments of that
cost, the one counted here has the fewest insertions plus deletions, so a misread word is one
substitution and not a deletion and an insertion. On any prefix pair (i reference words, j
hypothesis words) insertions minus deletions is j - i, so the cost and insertions + deletions
determine all three counts; the dynamic programme keeps both in one integer key per cell,
``cost * 2**32 + (insertions + deletions)``, and minimises it.

Each row is computed at once with numpy: the insertion move within a row (``key[j - 1] + step``) is a
running minimum of ``candidate[k] - k * step`` plus ``j * step``. Memory is one row, time one numpy pass
per reference word, so an hour-long transcript aligns in about a second.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields

import numpy as np

_COST = np.int64(1) << 32  # the key's unit of edit cost; insertions + deletions stay far below it
_GAP = _COST + 1  # an insertion or a deletion: one edit, one more of insertions + deletions


@dataclass(frozen=True)
class WordOps:
    """Edit operations of one alignment; their sum is the word errors."""

    substitutions: int = 0
    deletions: int = 0
    insertions: int = 0

    @property
    def errors(self) -> int:
        return self.substitutions + self.deletions + self.insertions

    def __add__(self, other: WordOps) -> WordOps:
        return WordOps(self.substitutions + other.substitutions, self.deletions + other.deletions,
                       self.insertions + other.insertions)

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


OP_NAMES = tuple(f.name for f in fields(WordOps))  # ("substitutions", "deletions", "insertions"): records' keys


def word_ops(ref: Sequence[str], hyp: Sequence[str]) -> WordOps:
    """The edit operations of ``hyp`` against ``ref`` (word sequences): the minimum edit distance,
    split with the fewest insertions plus deletions (see the module docstring)."""
    n, m = len(ref), len(hyp)
    if n == 0 or m == 0:
        return WordOps(0, n, m)
    ids: dict[str, int] = {}
    ref_ids = np.array([ids.setdefault(w, len(ids)) for w in ref], dtype=np.int64)  # (n,)
    hyp_ids = np.array([ids.setdefault(w, len(ids)) for w in hyp], dtype=np.int64)  # (m,)
    steps = np.arange(m + 1, dtype=np.int64) * _GAP  # (m + 1,) j insertions from the row's start
    row = steps.copy()  # (m + 1,) keys of the empty reference prefix: j insertions
    for i in range(1, n + 1):
        candidate = np.empty(m + 1, dtype=np.int64)
        candidate[0] = i * _GAP  # i deletions
        diagonal = row[:-1] + (hyp_ids != ref_ids[i - 1]) * _COST  # match or substitution
        candidate[1:] = np.minimum(diagonal, row[1:] + _GAP)  # or delete the reference word
        row = np.minimum.accumulate(candidate - steps) + steps  # or insert hypothesis words
    key = int(row[-1])
    cost, gaps = key // int(_COST), key % int(_COST)
    insertions = (gaps + m - n) // 2
    deletions = gaps - insertions
    return WordOps(cost - gaps, deletions, insertions)
