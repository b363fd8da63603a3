"""Run a command and write its peak resident memory: ``python -m asr.ablation.peak_rss OUT.json -- CMD ...``.

Why a launcher: Linux carries a process's RSS high-water mark across ``exec``, so a
child forked straight from a large parent (the ablation runner holds torch and
evaluated models) reports the *parent's* size as its peak. This small stdlib-only
process is what forks the command, so the command's peak starts from a few MB
and reflects itself (and its reaped DataLoader workers) only.

Writes ``{"peak_rss_mb": float, "returncode": int}`` to OUT.json and exits with
the command's status.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print(f"usage: python -m asr.ablation.peak_rss OUT.json -- CMD [ARGS...]  (got {argv})", file=sys.stderr)
        return 2
    out, cmd = Path(argv[0]), argv[2:]
    proc = subprocess.Popen(cmd)
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    except KeyboardInterrupt:
        proc.wait()
        raise
    code = proc.returncode = os.waitstatus_to_exitcode(status)
    # ru_maxrss is in KiB on Linux.
    out.write_text(json.dumps({"peak_rss_mb": usage.ru_maxrss / 1024.0, "returncode": code}))
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
