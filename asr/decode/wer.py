"""Word and character error rates, accumulated over utterances.

Words are whitespace-separated tokens. Characters are the text's characters
with all whitespace removed, so CER means the same for space-separated
(English) and unsegmented (Mandarin) transcripts. No other normalisation
happens here (case, punctuation): do it before ``add`` if wanted.
"""

from __future__ import annotations

import editdistance


def _rate(errors: int, total: int) -> float:
    if total == 0:
        # No reference words: perfect if the hypothesis is empty too, otherwise unbounded.
        return 0.0 if errors == 0 else float("inf")
    return errors / total


class ErrorCounter:
    """Accumulates edit distances; ``records`` keeps one dict per utterance."""

    def __init__(self) -> None:
        self.records: list[dict] = []
        self.word_errors = 0
        self.ref_words = 0
        self.char_errors = 0
        self.ref_chars = 0

    def add(self, ref: str, hyp: str, key: str = "", **extra) -> dict:
        """Score one utterance; ``extra`` fields (e.g. ``seconds``) are kept in its record.

        Returns:
            {key, ref, hyp, word_errors, ref_words, char_errors, ref_chars, **extra}
        """
        ref_w, hyp_w = ref.split(), hyp.split()
        ref_c, hyp_c = "".join(ref_w), "".join(hyp_w)
        record = {
            "key": key,
            "ref": ref,
            "hyp": hyp,
            "word_errors": int(editdistance.eval(ref_w, hyp_w)),
            "ref_words": len(ref_w),
            "char_errors": int(editdistance.eval(ref_c, hyp_c)),
            "ref_chars": len(ref_c),
            **extra,
        }
        self.records.append(record)
        self.word_errors += record["word_errors"]
        self.ref_words += record["ref_words"]
        self.char_errors += record["char_errors"]
        self.ref_chars += record["ref_chars"]
        return record

    @property
    def wer(self) -> float:
        """Word errors / reference words over everything added."""
        return _rate(self.word_errors, self.ref_words)

    @property
    def cer(self) -> float:
        """Character errors / reference characters (whitespace excluded)."""
        return _rate(self.char_errors, self.ref_chars)

    def summary(self) -> dict:
        """Totals and rates: {utterances, word_errors, ref_words, wer, char_errors, ref_chars, cer}."""
        return {
            "utterances": len(self.records),
            "word_errors": self.word_errors,
            "ref_words": self.ref_words,
            "wer": self.wer,
            "char_errors": self.char_errors,
            "ref_chars": self.ref_chars,
            "cer": self.cer,
        }
