"""Where a decode writes its results: one folder per input, never shared with another input.

A decode's input is what it reads, by absolute path (:func:`input_identity`). Its default folder is
named from the input, ``<folder>_<stem>[+N]-<hash>`` (N more sources; the hash is of the identity),
so a ``dev/data.list`` and a ``test/data.list`` never meet in one folder. summary.json records the
identity under ``input``; :func:`check_out_dir` refuses a folder whose summary.json names another.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path


class OutDirError(ValueError):
    """An output folder that holds another input's results; the message is one line."""


def input_identity(sources: Sequence[str | Path] = (), text: str | Path | None = None,
                   cuts: str | Path | None = None) -> dict:
    """The absolute paths a decode reads: ``sources`` (inputs in order) and their references ``text``,
    or a corpus split's ``cuts`` manifest."""
    if cuts is not None:
        return {"cuts": str(Path(cuts).resolve())}
    return {"sources": [str(Path(s).resolve()) for s in sources],
            "text": None if text is None else str(Path(text).resolve())}


def input_folder_name(identity: dict) -> str:
    """``<parent folder>_<stem>[+N]-<8 hex digits of the identity>`` (module docstring)."""
    paths = identity.get("sources") or [identity["cuts"]]
    first = Path(paths[0])
    stem = first.name.split(".")[0] or first.name
    name = f"{first.parent.name}_{stem}" if first.parent.name else stem
    if len(paths) > 1:
        name += f"+{len(paths) - 1}"
    digest = hashlib.sha1(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:8]
    return f"{name}-{digest}"


def check_out_dir(out_dir: Path, identity: dict) -> str | None:
    """Refuse (:class:`OutDirError`) a folder whose summary.json names another input; a note (else None)
    when it holds results that name none (written before summaries named their input)."""
    summary_path = out_dir / "summary.json"
    if not summary_path.is_file():
        return None
    try:
        previous = json.loads(summary_path.read_text(encoding="utf-8")).get("input")
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
        raise OutDirError(f"{summary_path} is not a decode summary: pass another --out-dir or move it away") from None
    if previous is None:
        return f"note: {out_dir} holds results that name no input; they are replaced"
    if previous != identity:
        raise OutDirError(f"{out_dir} holds the results of another input ({_describe(previous)}); pass another "
                          f"--out-dir, or leave it out for a folder of this input's own")
    return None


def _describe(identity: dict) -> str:
    if "cuts" in identity:
        return identity["cuts"]
    sources = ", ".join(identity.get("sources", []))
    return sources + (f" with references {identity['text']}" if identity.get("text") else "")
