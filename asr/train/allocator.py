"""The memory allocator a training process runs on.

A training step on the CPU allocates and frees the same large buffers every step (activations, their
gradients, and under bf16 autocast a low-precision copy of every weight a matrix product reads). The C
library's malloc hands part of that memory back to the system and takes it again; under tcmalloc the
room recipe's bf16 step inside Lightning's loop runs about a fifth faster (data/results/speed.md).
PyTorch's own CPU launcher (``torch.backends.xeon.run_cpu``) preloads tcmalloc or jemalloc for the same
reason.

An allocator is chosen before a process starts (``LD_PRELOAD``), so training re-executes itself once with
the library preloaded (:func:`reexec_with_allocator`). ``ASR_ALLOCATOR`` chooses: ``auto`` (tcmalloc, else
jemalloc, else oneTBB's scalable allocator, where installed; else the C library's), ``tcmalloc``, ``jemalloc``,
``tbbmalloc``, ``system`` (no preload), or a library's path. tcmalloc and jemalloc come from the system's
packages; oneTBB's from the ``tbb`` wheel (a dependency on Linux x86-64), which installs its libraries into the
environment's ``lib`` folder, so a fresh ``pip install`` trains on it without root. Processes a run starts later
(Lightning's other ranks, data loader workers) inherit it.
"""

from __future__ import annotations

import os
import site
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

ALLOCATOR_ENV = "ASR_ALLOCATOR"
# Set in the re-executed process: it never re-executes again, and its summary names the library.
PRELOADED_ENV = "ASR_ALLOCATOR_PRELOADED"
SETTINGS = ("auto", "tcmalloc", "jemalloc", "tbbmalloc", "system")
# The file names distributions install (Debian: libtcmalloc-minimal4, libjemalloc2; PyPI: tbb), in order of
# preference; auto tries the allocators in this order.
LIBRARIES = {
    "tcmalloc": ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4"),
    "jemalloc": ("libjemalloc.so.2",),
    "tbbmalloc": ("libtbbmalloc_proxy.so.2",),
}
# Libraries a preloaded one needs from its own folder, preloaded before it: the tbb wheel's folder is not on the
# loader's search path, and the proxy (which replaces malloc) links the allocator itself.
COMPANIONS = {"libtbbmalloc_proxy.so.2": ("libtbbmalloc.so.2",)}
# Settings each allocator runs with unless the caller set them. tcmalloc writes a line to stderr for every
# allocation over 1 GiB, which long batches on a GPU host make; oneTBB hands every object over its huge-size
# threshold back to the system when freed, which a training step's activations then fault in again (four times
# the page faults of tcmalloc at 1 MiB, eight at its default: data/results/speed.md).
LIBRARY_ENV = {
    "tcmalloc": {"TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD": str(1 << 40)},
    "tbbmalloc": {"TBB_MALLOC_SET_HUGE_SIZE_THRESHOLD": str(1 << 20)},
}
# Names in LD_PRELOAD that replace malloc: a caller who preloads one (or mimalloc) keeps it.
ALLOCATOR_MARKERS = (*LIBRARIES, "mimalloc")
INSTALL_HINTS = {
    "tcmalloc": "apt-get install -y libtcmalloc-minimal4",
    "jemalloc": "apt-get install -y libjemalloc2",
    "tbbmalloc": "pip install tbb",
}
INSTALL_HINT = f"{INSTALL_HINTS['tbbmalloc']}, or {INSTALL_HINTS['tcmalloc']}"


@dataclass(frozen=True)
class AllocatorChoice:
    """``name``: a key of :data:`LIBRARIES`, system, preloaded (by the caller) or a path's file name; ``path``: the
    library to preload, None when nothing is preloaded here; ``none_installed``: auto found no library."""

    name: str
    path: Path | None
    reason: str
    none_installed: bool = False


def search_dirs() -> list[Path]:
    """Where shared libraries of this interpreter's environment and the system's live, in that order."""
    multiarch = sysconfig.get_config_var("MULTIARCH") or f"{os.uname().machine}-linux-gnu"
    roots = [Path(sys.prefix) / "lib", Path(site.getuserbase()) / "lib"]
    if os.environ.get("CONDA_PREFIX"):
        roots.append(Path(os.environ["CONDA_PREFIX"]) / "lib")
    roots += [Path("/usr/local/lib"), Path("/usr/lib") / multiarch, Path("/lib") / multiarch,
              Path("/usr/lib64"), Path("/usr/lib")]
    return roots


def find_library(name: str, dirs: list[Path] | None = None) -> Path | None:
    """The first installed file of allocator ``name`` (a key of :data:`LIBRARIES`) in ``dirs``."""
    for directory in search_dirs() if dirs is None else dirs:
        for file_name in LIBRARIES[name]:
            candidate = directory / file_name
            if candidate.is_file():
                return candidate
    return None


def choose(setting: str, dirs: list[Path] | None = None, platform: str = sys.platform) -> AllocatorChoice:
    """The allocator ``setting`` (an :data:`ALLOCATOR_ENV` value) names here; ValueError for a library that
    is not installed or a setting that names none."""
    setting = setting.strip() or "auto"
    dirs = search_dirs() if dirs is None else dirs
    if setting == "system":
        return AllocatorChoice("system", None, f"{ALLOCATOR_ENV}=system")
    if "/" in setting:
        path = Path(setting)
        if not path.is_file():
            raise ValueError(f"{ALLOCATOR_ENV}={setting}: no such file")
        return AllocatorChoice(path.name, path, f"{ALLOCATOR_ENV} names it")
    if setting not in SETTINGS:
        raise ValueError(f"{ALLOCATOR_ENV}={setting}: expected one of {', '.join(SETTINGS)} or a library's path")
    if platform != "linux":
        return AllocatorChoice("system", None, f"preloading an allocator is Linux's ({platform} here)")
    names = list(LIBRARIES) if setting == "auto" else [setting]
    for name in names:
        path = find_library(name, dirs)
        if path is not None:
            return AllocatorChoice(name, path, f"{ALLOCATOR_ENV}={setting}")
    if setting == "auto":
        reason = f"no tcmalloc, jemalloc or tbbmalloc installed (for faster CPU training: {INSTALL_HINT})"
        return AllocatorChoice("system", None, reason, none_installed=True)
    searched = ", ".join(str(d) for d in dirs)
    raise ValueError(f"{ALLOCATOR_ENV}={setting}: none of {', '.join(LIBRARIES[setting])} in {searched} "
                     f"(to install it: {INSTALL_HINTS[setting]})")


def caller_preload(env: Mapping[str, str]) -> str | None:
    """The allocator library the caller already preloads (an ``LD_PRELOAD`` entry), if any."""
    for entry in env.get("LD_PRELOAD", "").replace(":", " ").split():
        if any(marker in Path(entry).name for marker in ALLOCATOR_MARKERS):
            return entry
    return None


def preload_paths(path: Path) -> list[Path]:
    """What preloading ``path`` takes, in order: its :data:`COMPANIONS` beside it (where present), then itself."""
    companions = [path.parent / name for name in COMPANIONS.get(path.name, ())]
    return [*(c for c in companions if c.is_file()), path]


def preload_env(env: Mapping[str, str], path: Path) -> dict[str, str]:
    """A copy of ``env`` that preloads ``path`` (and its companions) before whatever ``LD_PRELOAD`` held, with
    the allocator's :data:`LIBRARY_ENV` where the caller has not set them, marked as done."""
    out = dict(env)
    out["LD_PRELOAD"] = " ".join(p for p in (*map(str, preload_paths(path)), env.get("LD_PRELOAD", "")) if p)
    out[PRELOADED_ENV] = str(path)
    for name, settings in LIBRARY_ENV.items():
        if name in path.name:
            for key, value in settings.items():
                out.setdefault(key, value)
    return out


def allocator_in_use(env: Mapping[str, str] | None = None) -> str:
    """What this process allocates with, for a run's summary: the preloaded library's file name or system."""
    env = os.environ if env is None else env
    path = env.get(PRELOADED_ENV) or caller_preload(env)
    return Path(path).name if path else "system"


def reexec_with_allocator(env: Mapping[str, str] | None = None,
                          execve: Callable[[str, list[str], dict[str, str]], None] = os.execve,
                          dirs: list[Path] | None = None) -> AllocatorChoice:
    """Re-execute this process with the allocator :data:`ALLOCATOR_ENV` chooses preloaded, once; returns the
    choice when nothing is re-executed (already preloaded, by this or by the caller, or nothing to preload).
    ``execve`` does not return when it replaces the process."""
    env = os.environ if env is None else env
    if env.get(PRELOADED_ENV):
        return AllocatorChoice(Path(env[PRELOADED_ENV]).name, None, "preloaded")
    preloaded = caller_preload(env)
    if preloaded is not None:
        return AllocatorChoice("preloaded", None, f"LD_PRELOAD holds {preloaded}")
    choice = choose(env.get(ALLOCATOR_ENV, "auto"), dirs)
    if choice.path is None:
        return choice
    # orig_argv keeps the interpreter's own options (-m asr.train, -X ...), which argv drops.
    execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], preload_env(env, choice.path))
    return choice


def preload_allocator_or_exit(env: Mapping[str, str] | None = None, dirs: list[Path] | None = None) -> None:
    """A training entry point's first step, before torch is imported: re-execute with the allocator; a
    setting that names nothing installed ends the program with its message, and a host with none to
    preload says once how to get one."""
    try:
        choice = reexec_with_allocator(env, dirs=dirs)
    except ValueError as err:
        sys.exit(f"error: {err}")
    if choice.none_installed:
        print(f"allocator: the C library's malloc; {choice.reason}", file=sys.stderr)
