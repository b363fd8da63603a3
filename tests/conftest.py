"""Fixtures shared by several test folders: one tiny synthetic corpus (about a minute of audio)."""

from __future__ import annotations

from pathlib import Path

import pytest

from asr.synth.corpus import SynthConfig, build_synth_corpus

TINY = dict(train_hours=0.012, dev_hours=0.002, test_hours=0.002, long_hours=0.005)


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("synth")
    build_synth_corpus(SynthConfig(str(out), seed=3, workers=1, **TINY), log=lambda *_: None)
    return out
