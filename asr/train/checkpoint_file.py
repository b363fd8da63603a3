"""Reading a checkpoint file as untrusted input: what it is, or one line saying why it is not usable.

Every entry point that takes a checkpoint (decode, stream, serve, export, average_checkpoints,
``init_from``, the Wenet importer) reads it through :func:`read_torch_file`, and the model checks
of ``asr.train.checkpoint``, so a bad file gets the same one-line :class:`CheckpointError` wherever
it is given, naming what is wrong (:data:`PROBLEMS`):

- ``missing``, ``unreadable``, ``empty``;
- ``truncated``: a zip archive cut short or with a damaged member (each member's CRC is checked:
  torch itself reads a flipped byte in a tensor as a different weight), a pickle cut short;
- ``not_a_checkpoint``: neither of torch's formats (random bytes, a text file, an ONNX model), a
  TorchScript export, a pickle torch never writes;
- ``carries_code``: a pickle that names a function or class to call (``weights_only=True`` refuses
  it; the message names what it would have called);
- ``not_ours``, ``no_weights``, ``no_tokenizer``, ``nonfinite``, ``foreign_architecture``: a readable
  checkpoint that is not a usable model of this toolkit (raised by ``asr.train.checkpoint``).

torch's own messages are not quoted: they advise setting ``weights_only=False``, which would run
whatever the file names. Its warnings while reading (a pickle protocol it did not write, a
TorchScript archive) are silenced here: the error line says what the file is.
"""

from __future__ import annotations

import contextlib
import pickle
import pickletools
import re
import warnings
import zipfile
from pathlib import Path
from typing import Any

import torch

# kind -> the sentence the message starts with ({path} is the file as given).
PROBLEMS = {
    "missing": "checkpoint {path} does not exist",
    "unreadable": "checkpoint {path} cannot be read",
    "empty": "checkpoint {path} is empty (0 bytes)",
    "truncated": "checkpoint {path} is truncated or damaged",
    "not_a_checkpoint": "{path} is not a checkpoint",
    "carries_code": "checkpoint {path} carries code (refused: loading it could run code)",
    "not_ours": "{path} is not a checkpoint of this toolkit",
    "no_weights": "checkpoint {path} holds no model weights",
    "no_tokenizer": "checkpoint {path} has no tokenizer",
    "nonfinite": "checkpoint {path} holds non-finite weights",
    "foreign_architecture": "checkpoint {path} holds a model of another architecture",
}
ZIP_MAGIC = b"PK\x03\x04"  # torch.save's default format is a zip archive
PICKLE_PROTO = b"\x80"  # a pickle of protocol >= 2: torch's legacy format starts so
_GLOBAL = re.compile(r"GLOBAL ([\w.]+)")  # how torch's weights-only unpickler names a refused global
# What torch's weights-only unpickler takes by default besides torch's own names: plain containers and bytes.
_SAFE_GLOBALS = frozenset({"_codecs.encode", "builtins.bytearray", "builtins.complex", "builtins.set",
                           "collections.Counter", "collections.OrderedDict"})
# Pickles scanned in a file: torch's legacy format is magic number, protocol, system info, the object,
# storage keys (then raw storage bytes).
_PICKLES_SCANNED = 5


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; ``kind`` is one of :data:`PROBLEMS`, the message one line."""

    def __init__(self, path: str | Path, kind: str, detail: str = "") -> None:
        if kind not in PROBLEMS:
            raise ValueError(f"checkpoint problem {kind!r} must be one of {', '.join(PROBLEMS)}")
        self.path, self.kind, self.detail = str(path), kind, detail
        head = PROBLEMS[kind].format(path=repr(str(path)))
        super().__init__(f"{head}: {detail}" if detail else head)


def check_file(path: str | Path) -> Path:
    """``path`` when it looks like one of torch's checkpoint formats; CheckpointError otherwise.

    Reads no more than the zip directory and each member's CRC (no unpickling), so a run that only
    hands the path on (a resume) can refuse a bad file before it starts.
    """
    path = Path(path)
    if not path.exists():
        raise CheckpointError(path, "missing")
    if not path.is_file():
        raise CheckpointError(path, "not_a_checkpoint", "a folder, not a file")
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            head = fh.read(8)
    except OSError as err:
        raise CheckpointError(path, "unreadable", err.strerror or type(err).__name__) from None
    if size == 0:
        raise CheckpointError(path, "empty")
    if head.startswith(ZIP_MAGIC):
        _check_zip(path, size)
    elif not head.startswith(PICKLE_PROTO):
        raise CheckpointError(path, "not_a_checkpoint",
                              f"neither a PyTorch zip archive nor a pickle (it starts with {head!r})")
    return path


def _check_zip(path: Path, size: int) -> None:
    """The zip archive is whole (its directory is there, every member's CRC matches) and not TorchScript."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            bad = archive.testzip()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError) as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise CheckpointError(path, "truncated", f"its zip archive cannot be opened ({reason}; {size} bytes)") from None
    if bad is not None:
        raise CheckpointError(path, "truncated", f"member {bad} of its zip archive fails its CRC check")
    if any(name.endswith("/constants.pkl") or "/code/" in name for name in names):
        raise CheckpointError(path, "not_a_checkpoint", "a TorchScript export (torch.jit.save), not a training "
                                                        "checkpoint")


def read_torch_file(path: str | Path) -> Any:
    """What ``torch.save`` wrote to ``path``, read with ``weights_only=True`` on the CPU.

    Tensors and plain containers only; anything else is a :class:`CheckpointError` naming why.
    """
    path = check_file(path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        # torch names a refused global only when it reaches it (not past opcodes it does not take).
        named = [n for n in _pickled_globals(path) if not _safe_global(n)] or _GLOBAL.findall(str(err))
        if named:
            raise CheckpointError(path, "carries_code", f"its pickle names {named[0]}, which loading "
                                                        "would import and call") from None
        if "truncated" in str(err):
            raise CheckpointError(path, "truncated", "its pickle ends early") from None
        raise CheckpointError(path, "not_a_checkpoint", "its pickle is not one torch.save writes") from None
    except EOFError:
        raise CheckpointError(path, "truncated", "its pickle ends early") from None
    except (RuntimeError, KeyError, ValueError, OSError, zipfile.BadZipFile) as err:
        # torch's reader on a file it did not write (a legacy pickle with another magic number, a zip
        # of other members): its first line, never the advice that follows it.
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        reason = f" ({first[:160]})" if "weights_only" not in first else ""
        raise CheckpointError(path, "not_a_checkpoint", f"torch cannot read it{reason}") from None


def _safe_global(name: str) -> bool:
    return name.startswith("torch.") or name in _SAFE_GLOBALS


def _pickled_globals(path: Path) -> list[str]:
    """``module.name`` of every global the file's pickles name, read opcode by opcode (nothing is run)."""
    names: list[str] = []
    strings: list[str] = []  # STACK_GLOBAL takes module and name from the two strings pushed before it
    with contextlib.ExitStack() as stack:
        if zipfile.is_zipfile(path):
            archive = stack.enter_context(zipfile.ZipFile(path))
            members = [n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
            if not members:
                return names
            stream = stack.enter_context(archive.open(members[0]))
        else:
            stream = stack.enter_context(open(path, "rb"))
        for _ in range(_PICKLES_SCANNED):
            try:
                for op, arg, _ in pickletools.genops(stream):
                    if op.name in ("GLOBAL", "INST"):
                        names.append(str(arg).replace(" ", "."))
                    elif op.name == "STACK_GLOBAL" and len(strings) >= 2:
                        names.append(".".join(strings[-2:]))
                    elif isinstance(arg, str):
                        strings.append(arg)
            except (ValueError, EOFError, UnicodeDecodeError, pickle.UnpicklingError):
                break  # past the last pickle (storage bytes) or a damaged one
    return names
