"""The quickstart rebuilds a corpus made with another synth profile than the default."""

import importlib.util
import json
from pathlib import Path

from asr.data.synth import DEFAULT_PROFILE, PROFILES

ROOT = Path(__file__).resolve().parents[2]


def _quickstart():
    spec = importlib.util.spec_from_file_location("quickstart_script", ROOT / "scripts" / "quickstart.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_corpus_ready_needs_every_file_and_the_default_profile(tmp_path):
    quickstart = _quickstart()
    for name in quickstart.CORPUS_FILES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    assert not quickstart.corpus_ready(tmp_path)  # no manifest_summary.json: unknown profile
    for profile in PROFILES:
        (tmp_path / "manifest_summary.json").write_text(json.dumps({"profile": profile}))
        assert quickstart.corpus_ready(tmp_path) == (profile == DEFAULT_PROFILE)
        assert quickstart.corpus_ready(tmp_path, profile)
        assert not any(quickstart.corpus_ready(tmp_path, other) for other in PROFILES if other != profile)
    # a summary from before profiles existed describes a clean corpus
    (tmp_path / "manifest_summary.json").write_text(json.dumps({"corpus": "synth"}))
    assert quickstart.corpus_ready(tmp_path) == (DEFAULT_PROFILE == "clean")
    (tmp_path / "manifest_summary.json").write_text(json.dumps({"profile": DEFAULT_PROFILE}))
    (tmp_path / "cmvn.json").unlink()
    assert not quickstart.corpus_ready(tmp_path)
