"""Word and character error rates, accumulated over utterances.

Words are whitespace-separated tokens. Characters are the text's characters
with all whitespace removed, so CER means the same for space-separated
(English) and unsegmented (Mandarin) transcripts. Before counting, reference and
hypothesis are normalized alike by a :class:`asr.decode.scoring.Scoring` (default:
case folded, punctuation removed); the records keep the texts as given. Word errors are split
into substitutions, deletions and insertions (`asr.decode.word_ops`), per record and in total.
"""

from __future__ import annotations

import editdistance

from asr.decode.scoring import Scoring
from asr.decode.word_ops import WordOps, word_ops


def _rate(errors: int, total: int) -> float:
    if total == 0:
        # No reference words: perfect if the hypothesis is empty too, otherwise unbounded.
        return 0.0 if errors == 0 else float("inf")
    return errors / total


class ErrorCounter:
    """Accumulates edit distances; ``records`` keeps one dict per utterance.

    ``scoring``: the normalization of both sides. Under case-sensitive scoring the word errors that
    folding case would remove are counted too (``case_only_word_errors``): a model that writes
    another case than its references shows there, not as a mystery WER."""

    def __init__(self, scoring: Scoring = Scoring()) -> None:
        self.scoring = scoring
        self.case_only_word_errors = 0
        self.records: list[dict] = []
        self.word_ops = WordOps()  # summed over the records; word_errors is their total
        self.ref_words = 0
        self.char_errors = 0
        self.ref_chars = 0

    def add(self, ref: str, hyp: str, key: str = "", **extra) -> dict:
        """Score one utterance; ``extra`` fields (e.g. ``seconds``) are kept in its record.

        Returns:
            {key, ref, hyp, word_errors, substitutions, deletions, insertions, ref_words, char_errors,
            ref_chars, **extra}: the three operations split word_errors (`asr.decode.word_ops`)
        """
        ref_w, hyp_w = self.scoring.normalize(ref).split(), self.scoring.normalize(hyp).split()
        ref_c, hyp_c = "".join(ref_w), "".join(hyp_w)
        ops = word_ops(ref_w, hyp_w)
        record = {
            "key": key,
            "ref": ref,
            "hyp": hyp,
            "word_errors": ops.errors,
            **ops.as_dict(),
            "ref_words": len(ref_w),
            "char_errors": int(editdistance.eval(ref_c, hyp_c)),
            "ref_chars": len(ref_c),
            **extra,
        }
        if self.scoring.case_sensitive and record["word_errors"]:
            folded = editdistance.eval([w.casefold() for w in ref_w], [w.casefold() for w in hyp_w])
            self.case_only_word_errors += record["word_errors"] - int(folded)
        self.records.append(record)
        self.word_ops += ops
        self.ref_words += record["ref_words"]
        self.char_errors += record["char_errors"]
        self.ref_chars += record["ref_chars"]
        return record

    @property
    def word_errors(self) -> int:
        return self.word_ops.errors

    @property
    def wer(self) -> float:
        """Word errors / reference words over everything added."""
        return _rate(self.word_errors, self.ref_words)

    @property
    def cer(self) -> float:
        """Character errors / reference characters (whitespace excluded)."""
        return _rate(self.char_errors, self.ref_chars)

    def summary(self) -> dict:
        """Totals and rates: {utterances, word_errors, substitutions, deletions, insertions, ref_words, wer,
        char_errors, ref_chars, cer}, and case_only_word_errors under case-sensitive scoring."""
        case = {"case_only_word_errors": self.case_only_word_errors} if self.scoring.case_sensitive else {}
        return {
            "utterances": len(self.records),
            "word_errors": self.word_errors,
            **self.word_ops.as_dict(),
            "ref_words": self.ref_words,
            "wer": self.wer,
            "char_errors": self.char_errors,
            "ref_chars": self.ref_chars,
            "cer": self.cer,
            **case,
        }
