"""Command-line programs: each module parses its arguments and makes one call into the package.

``scripts/<name>.py`` runs ``asr.cli.<name>.main``; the help text is the module's docstring. Tests
call ``main(argv)`` here instead of loading a script by its path.
"""

import os
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]  # holds asr/: the code a child program runs


def child_env() -> dict[str, str]:
    """The environment for a ``python -m asr.cli...`` child (or a script): this checkout's package first,
    whatever an installed one would give it. PYTHONSAFEPATH (Python >= 3.11): -m does not put the working
    folder first, where another checkout's asr/ may sit."""
    path = os.pathsep.join(filter(None, [str(CHECKOUT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "PYTHONSAFEPATH": "1"}
