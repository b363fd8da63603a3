"""The optional parts of the install (pyproject.toml's extras): a code path that needs one imports its
modules through :func:`require`, which names the extra to install in one line instead of a deep ImportError."""

from __future__ import annotations

import importlib
from types import ModuleType

DISTRIBUTION = "relxl-asr"


class MissingExtra(ImportError):
    """A module of an extra that is not installed; the message says which extra and how to install it."""


def require(module: str, extra: str, needed_by: str) -> ModuleType:
    """Import ``module`` (of the extra ``extra``), or raise :class:`MissingExtra` saying what needs it."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise MissingExtra(f"{needed_by} needs {module} (the '{extra}' extra): pip install -e '.[{extra}]' in a "
                           f"checkout, or pip install '{DISTRIBUTION}[{extra}]'") from err
