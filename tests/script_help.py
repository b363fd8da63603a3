"""Print, as JSON, the ``--help`` of each script named on the command line, all from one interpreter.

Each script runs as a program (``__main__``, ``sys.argv = [script, "--help"]``), exactly as
``python scripts/X.py --help`` would, but the imports they share (torch, Lightning, Lhotse) load
once instead of once per script, which keeps tests/test_readme.py fast. Output: {script: {"code":
exit status, "help": what it printed, "error": the traceback's last line or ""}}.
"""

import contextlib
import io
import json
import runpy
import sys
import traceback


def script_help(script: str) -> dict:
    printed = io.StringIO()
    sys.argv = [script, "--help"]
    code, error = 0, ""
    try:
        with contextlib.redirect_stdout(printed):
            runpy.run_path(script, run_name="__main__")
    except SystemExit as end:
        code = end.code if isinstance(end.code, int) else (0 if end.code is None else 1)
    except Exception:  # noqa: BLE001 - reported to the test, which names the script
        code, error = 1, traceback.format_exc().strip().splitlines()[-1]
    return {"code": code, "help": printed.getvalue(), "error": error}


if __name__ == "__main__":
    results = {script: script_help(script) for script in sys.argv[1:]}
    sys.stdout.write(json.dumps(results))
