"""How a reference and a hypothesis are made comparable before their errors are counted.

The same :meth:`Scoring.normalize` is applied to both sides. By default case is folded
(``str.casefold``) and punctuation is removed: every character of a Unicode punctuation
category (P*) is deleted, except an apostrophe between two letters ("don't" stays one word).
Models disagree with their references on exactly these: Wenet's English BPE models write upper
case, most references are lower case, and references often carry punctuation that no CTC
vocabulary has. ``case_sensitive`` and ``keep_punctuation`` score exactly what was written.
"""

from __future__ import annotations

import argparse
import unicodedata
from dataclasses import dataclass

APOSTROPHES = "'\u2019"


def _is_punctuation(text: str, i: int) -> bool:
    ch = text[i]
    if not unicodedata.category(ch).startswith("P"):
        return False
    inside_word = 0 < i < len(text) - 1 and text[i - 1].isalpha() and text[i + 1].isalpha()
    return not (ch in APOSTROPHES and inside_word)


def remove_punctuation(text: str) -> str:
    """``text`` without its punctuation (apostrophes inside words kept), whitespace squeezed."""
    return " ".join("".join(ch for i, ch in enumerate(text) if not _is_punctuation(text, i)).split())


@dataclass(frozen=True)
class Scoring:
    """What is ignored when a hypothesis is compared with its reference (the same on both sides)."""

    case_sensitive: bool = False
    keep_punctuation: bool = False

    def normalize(self, text: str) -> str:
        """``text`` as it is scored: whitespace squeezed, case folded and punctuation removed unless kept."""
        text = text if self.keep_punctuation else remove_punctuation(text)
        return " ".join((text if self.case_sensitive else text.casefold()).split())

    def describe(self) -> str:
        """One line for a table and summary.json."""
        case = "case-sensitive" if self.case_sensitive else "case folded"
        punctuation = "punctuation kept" if self.keep_punctuation else "punctuation removed"
        return f"{case}, {punctuation}, applied to references and hypotheses alike"

    def settings(self) -> dict:
        """JSON-ready: the two switches and :meth:`describe`."""
        return {"case_sensitive": self.case_sensitive, "keep_punctuation": self.keep_punctuation,
                "rule": self.describe()}


def add_scoring_arguments(parser: argparse.ArgumentParser) -> None:
    """--case-sensitive and --keep-punctuation (default: case folded, punctuation removed)."""
    parser.add_argument("--case-sensitive", action="store_true",
                        help="score case as written (default: case folded on both sides)")
    parser.add_argument("--keep-punctuation", action="store_true",
                        help="score punctuation as written (default: removed on both sides, apostrophes inside "
                             "words kept)")


def scoring_from_args(args: argparse.Namespace) -> Scoring:
    return Scoring(case_sensitive=args.case_sensitive, keep_punctuation=args.keep_punctuation)


def case_warning(summary_modes: dict, scoring: Scoring) -> list[str]:
    """One line per mode whose word errors are partly case differences only, under case-sensitive scoring."""
    if not scoring.case_sensitive:
        return []
    lines = []
    for mode, totals in summary_modes.items():
        case_only = totals.get("case_only_word_errors") or 0
        if case_only:
            lines.append(f"warning: {mode}: {case_only} of its {totals['word_errors']} word errors differ from the "
                         "reference in case only (scored case-sensitively); drop --case-sensitive to score them as "
                         "equal")
    return lines
