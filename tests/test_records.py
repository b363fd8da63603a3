"""Every figure the READMEs quote carries the commit it was measured at: a paragraph of README.md or
data/README.md that states a measured figure links a record in data/results/ and names a commit that
this record names on a commit line; every record names, on a commit line, commits this repository
holds; and data/README.md lists every record."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "data" / "results"
READMES = (ROOT / "README.md", ROOT / "data" / "README.md")
# A measured figure: a percentage, a ratio (1.37x), a duration in minutes or milliseconds, a size.
FIGURE = re.compile(r"\b\d+(?:\.\d+)?(?:%|x\b| ?(?:ms|min|minutes|GiB|GB)\b)")
HASH = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")
RECORD_LINK = re.compile(r"\]\((?:data/)?results/([\w.-]+\.md)\)")


def paragraphs(markdown: str) -> list[str]:
    """Blocks between blank lines, code fences and inline code removed (commands and example output
    are not figures); a table row is a block of its own."""
    text = re.sub(r"^```.*?^```", "", markdown, flags=re.MULTILINE | re.DOTALL)
    blocks = []
    for block in re.split(r"\n\s*\n", text):
        lines = block.splitlines()
        blocks += lines if lines and lines[0].startswith("|") else ["\n".join(lines)]
    return [re.sub(r"`[^`]*`", "", block) for block in blocks]


def commit_lines(record: Path) -> list[str]:
    return [line for line in record.read_text().splitlines() if re.search(r"commit", line, re.IGNORECASE)]


def named_commits(record: Path) -> set[str]:
    return {h for line in commit_lines(record) for h in HASH.findall(line)}


def test_the_figure_and_hash_patterns():
    assert [p for p in paragraphs("a 3.04% b\n\n`1.5x`\n\n```\n12 min\n```\n| 5 ms |\n| x |") if FIGURE.search(p)] == [
        "a 3.04% b", "| 5 ms |"]
    assert HASH.findall("commit 695114d, 2026-11-27, 1234567 and abcdefa") == ["695114d"]


@pytest.mark.parametrize("readme", READMES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_figure_names_its_record_and_commit(readme):
    bad = []
    for block in paragraphs(readme.read_text()):
        if not FIGURE.search(block):
            continue
        records = [RESULTS / name for name in RECORD_LINK.findall(block)]
        known = set().union(*(named_commits(r) for r in records if r.is_file())) if records else set()
        if not records or not set(HASH.findall(block)) & known:
            bad.append(block.strip()[:160])
    assert not bad, (f"{readme.name}: figures without a linked record and the commit that record names "
                     f"(add both, or measure again):\n" + "\n".join(bad))


@pytest.fixture(scope="module")
def git_objects():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")

    def exists(commit: str) -> bool:
        return subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=ROOT,
                              capture_output=True).returncode == 0
    return exists


@pytest.mark.parametrize("record", sorted(RESULTS.glob("*.md")), ids=lambda p: p.name)
def test_every_record_names_commits_this_repository_holds(record, git_objects):
    named = named_commits(record)
    assert named, f"{record.name} names no commit on a commit line"
    missing = sorted(h for h in named if not git_objects(h))
    assert not missing, f"{record.name} names commits git does not know: {missing}"


def test_data_readme_lists_every_record():
    listed = set(re.findall(r"`results/([\w.-]+\.md)`", (ROOT / "data" / "README.md").read_text()))
    missing = sorted({p.name for p in RESULTS.glob("*.md")} - listed)
    assert not missing, f"data/README.md does not list: {missing}"
