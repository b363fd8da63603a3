"""Code, configs and scripts say why in the present tense: no issue numbers and no dates in them.

History (what changed when, the figures before) lives in git and the measurement records in
data/results/; a comment that cites an issue or a date goes stale the day it is merged.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ("asr", "conf", "scripts")
MARKS = {
    "issue number": re.compile(r"issue [0-9]", re.IGNORECASE),
    "ISO date": re.compile(r"20[0-9][0-9]-[01][0-9]-[0-3][0-9]"),
}


def text_files(folder: Path):
    """Every file under ``folder`` that reads as UTF-8 text (binaries and caches skipped)."""
    for path in sorted(folder.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        data = path.read_bytes()
        if b"\0" in data:
            continue
        try:
            yield path, data.decode("utf-8")
        except UnicodeDecodeError:
            continue


def history_marks(text: str) -> list[tuple[int, str, str]]:
    """(line number, kind, the line) of every issue number or ISO date in ``text``."""
    return [(number, kind, line.strip())
            for number, line in enumerate(text.splitlines(), 1)
            for kind, pattern in MARKS.items() if pattern.search(line)]


@pytest.mark.parametrize("text, kinds", [
    ("# chosen for issue 33", ["issue number"]),
    ("x = 1  # see Issue 7", ["issue number"]),
    ('"""The default since 2026-11-26."""', ["ISO date"]),
    ("# (issue 38, 2025-01-31)", ["issue number", "ISO date"]),
    ("# an issue with the cache; 2026 frames; run dir _%Y-%m-%d_", []),
])
def test_marks_are_found(text, kinds):
    assert [kind for _, kind, _ in history_marks(text)] == kinds


@pytest.mark.parametrize("folder", CHECKED)
def test_no_issue_numbers_or_dates(folder):
    found = [f"{path.relative_to(ROOT)}:{number}: {kind}: {line}"
             for path, text in text_files(ROOT / folder)
             for number, kind, line in history_marks(text)]
    assert not found, ("say why in the present tense, without issue numbers or dates (figures go to "
                       "data/results/):\n" + "\n".join(found))
