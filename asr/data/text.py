"""Transcript normalization and number spelling.

The synthetic corpus writes every transcript exactly as it is spoken: lowercase
words and apostrophes only, numbers spelled out. Importers of real corpora use
`squeeze_spaces` only, so their transcripts keep whatever convention the corpus has.
"""

from __future__ import annotations

import re

_ONES = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen "
    "fourteen fifteen sixteen seventeen eighteen nineteen"
).split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_ORDINAL_IRREGULAR = {
    "one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth",
    "nine": "ninth", "twelve": "twelfth",
}
MONTHS = (
    "january february march april may june july august september october november december"
).split()
WEEKDAYS = "monday tuesday wednesday thursday friday saturday sunday".split()


def number_to_words(n: int) -> str:
    """Spell a non-negative integer below one billion as English words."""
    if not 0 <= n < 1_000_000_000:
        raise ValueError(f"number_to_words supports 0 <= n < 1e9, got {n}")
    if n < 20:
        return _ONES[n]
    if n < 100:
        tens, ones = divmod(n, 10)
        return _TENS[tens] + ("" if ones == 0 else " " + _ONES[ones])
    if n < 1000:
        hundreds, rest = divmod(n, 100)
        head = _ONES[hundreds] + " hundred"
        return head if rest == 0 else f"{head} and {number_to_words(rest)}"
    for size, name in ((1_000_000, "million"), (1000, "thousand")):
        if n >= size:
            high, rest = divmod(n, size)
            head = f"{number_to_words(high)} {name}"
            if rest == 0:
                return head
            return f"{head} {'and ' if rest < 100 else ''}{number_to_words(rest)}"
    raise AssertionError("unreachable")


def ordinal_words(n: int) -> str:
    """Spell an ordinal ("twenty first") for 1 <= n < 1e9."""
    if n < 1:
        raise ValueError(f"ordinals start at 1, got {n}")
    words = number_to_words(n).split()
    last = words[-1]
    if last in _ORDINAL_IRREGULAR:
        words[-1] = _ORDINAL_IRREGULAR[last]
    elif last.endswith("y"):
        words[-1] = last[:-1] + "ieth"
    else:
        words[-1] = last + "th"
    return " ".join(words)


def year_words(year: int) -> str:
    """Spell a year the way people say it: 1987 -> "nineteen eighty seven"."""
    if 2000 <= year < 2010:
        return number_to_words(year)
    high, low = divmod(year, 100)
    if low == 0:
        return f"{number_to_words(high)} hundred"
    low_words = number_to_words(low) if low >= 10 else f"oh {number_to_words(low)}"
    return f"{number_to_words(high)} {low_words}"


def time_words(hour: int, minute: int) -> str:
    """Spell a clock time: (7, 30) -> "seven thirty", (9, 0) -> "nine o'clock"."""
    if not (0 <= hour < 24 and 0 <= minute < 60):
        raise ValueError(f"invalid time {hour}:{minute}")
    h12 = hour % 12 or 12
    if minute == 0:
        return f"{number_to_words(h12)} o'clock"
    if minute < 10:
        return f"{number_to_words(h12)} oh {number_to_words(minute)}"
    return f"{number_to_words(h12)} {number_to_words(minute)}"


_DIGITS = re.compile(r"\d+")
_NOT_ALLOWED = re.compile(r"[^a-z' ]+")


def squeeze_spaces(text: str) -> str:
    """Collapse runs of whitespace and strip the ends."""
    return " ".join(text.split())


def normalize_text(text: str) -> str:
    """Lowercase, spell digits as words, keep only letters, apostrophes and single spaces.

    >>> normalize_text("Call Anna at 7, NOW!")
    'call anna at seven now'
    """
    text = _DIGITS.sub(lambda m: f" {number_to_words(int(m.group()))} ", text.lower())
    text = _NOT_ALLOWED.sub(" ", text)
    # apostrophes only inside words ("don't"), never as quotes
    words = [w.strip("'") for w in text.split()]
    return " ".join(w for w in words if w)
