"""Install by need: what the programs that prepare one's own corpus, train, decode, stream and serve import
comes with the base install (pyproject.toml's ``dependencies`` and what they require in turn): none of them
needs an extra (the synthetic corpus's TTS engines and their C compiler among them)."""

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from asr.extras import MissingExtra, require

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]
# scripts/prepare_data.py imports asr.synth.corpus for its profile names: the engines load only when used.
ENTRY_POINTS = ("asr.train", "asr.train.run", "asr.decode", "asr.cli.decode", "asr.cli.stream", "asr.serve",
                "asr.cli.serve", "asr.prepare", "asr.synth.corpus", "asr.data.cmvn", "asr.cli.average_checkpoints")
# Records the top-level module of every absolute import statement that a module of asr/ runs while the entry
# points load (optional imports inside the libraries themselves are their own business).
ASR_IMPORTS = (
    "import builtins, json\n"
    "seen, plain = set(), builtins.__import__\n"
    "def record(name, globals=None, locals=None, fromlist=(), level=0):\n"
    "    if level == 0 and str((globals or {}).get('__name__', '')).split('.')[0] == 'asr':\n"
    "        seen.add(name.split('.')[0])\n"
    "    return plain(name, globals, locals, fromlist, level)\n"
    "builtins.__import__ = record\n"
    f"for name in {ENTRY_POINTS!r}: __import__(name)\n"
    "print(json.dumps(sorted(seen)))\n"
)


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def applies(requirement: Requirement) -> bool:
    """Whether a requirement holds on this machine without any extra (markers such as ``extra == "x"`` fail)."""
    return requirement.marker is None or requirement.marker.evaluate({**default_environment(), "extra": ""})


def with_requirements(names: set[str]) -> set[str]:
    """``names`` and every distribution they require, transitively, as installed here (no extras)."""
    seen, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        todo += [canonicalize_name(r.name) for r in map(Requirement, requires) if applies(r)]
    return seen


def base_distributions() -> set[str]:
    return with_requirements({canonicalize_name(Requirement(r).name) for r in project()["dependencies"]
                              if applies(Requirement(r))})


def imported_third_party() -> dict[str, set[str]]:
    """Third-party top-level module that asr/ imports in a fresh interpreter loading the entry points -> its
    distributions."""
    out = subprocess.run([sys.executable, "-c", ASR_IMPORTS], cwd=ROOT, capture_output=True, text=True,
                         timeout=300, check=True).stdout
    providers = metadata.packages_distributions()
    own = {"asr", "__main__"}
    return {module: {canonicalize_name(d) for d in providers[module]} for module in json.loads(out.splitlines()[-1])
            if module not in own and module not in sys.stdlib_module_names and module in providers}


def test_base_install_covers_what_training_decoding_and_serving_import():
    base = base_distributions()
    loaded = imported_third_party()
    assert {"torch", "lightning", "lhotse"} <= set(loaded), f"the entry points did not load as expected: {sorted(loaded)}"
    missing = {module: sorted(dists) for module, dists in loaded.items() if not dists & base}
    assert not missing, (f"{ENTRY_POINTS} import modules whose distributions the base install does not "
                         f"bring (add them to dependencies, or import them lazily behind an extra): {missing}")


def test_the_synth_extra_holds_the_tts_engines_and_the_base_none():
    extras = project()["optional-dependencies"]
    synth = {canonicalize_name(Requirement(r).name) for r in extras["synth"]}
    assert {"ttspico", "hibari-tts", "piper-tts", "espeakng-loader"} <= synth
    assert not synth & {canonicalize_name(Requirement(r).name) for r in project()["dependencies"]}


def test_the_test_extra_takes_every_extra_the_suite_imports():
    name = canonicalize_name(project()["name"])
    dev = [Requirement(r) for r in project()["optional-dependencies"]["dev"]]
    assert {"synth", "export", "sherpa"} <= set().union(*(r.extras for r in dev if canonicalize_name(r.name) == name))


def test_a_missing_extra_is_named_in_one_line():
    assert require("json", "synth", "a test") is json
    with pytest.raises(MissingExtra, match=r"^the synth corpus needs no_such_module \(the 'synth' extra\): "
                                           r"pip install -e '\.\[synth\]'") as caught:
        require("no_such_module", "synth", "the synth corpus")
    assert "\n" not in str(caught.value)
