"""The end every session benchmark's script shares: run it, print its table, write its JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Callable

Log = Callable[[str], None]


def run_and_report(run: Callable[[Log], dict], format_report: Callable[[dict], str], out_json: str | None) -> int:
    """Run a benchmark (``run(log)``: progress lines go to stderr), print its table and write its JSON.

    A bad setting or a server that fails (ValueError, RuntimeError, OSError, raised while building the
    configuration or running) is one line on stderr and exit status 2, not a traceback.
    """
    try:
        report = run(lambda line: print(line, file=sys.stderr, flush=True))
    except (ValueError, RuntimeError, OSError) as err:
        print(f"error: {(str(err).splitlines() or [type(err).__name__])[0]}", file=sys.stderr)
        return 2
    print(format_report(report))
    if out_json:
        Path(out_json).parent.mkdir(parents=True, exist_ok=True)
        Path(out_json).write_text(json.dumps(report, indent=1))
    return 0
