"""A segmented Wenet data.list read by Wenet's own ``decode_wav`` and by the importer: the same samples.

Wenet's ``wenet/dataset/processor.py`` is exported from the mirror of its repository (or taken from
a checkout named by ``WENET_SRC``); the test skips, saying so, when neither is there. Loading it needs
shims that leave its segment arithmetic (``int(start * rate)``, ``int(end * rate)``, a frame offset
and a frame count) as it is: ``librosa`` and ``langid`` are stubbed (imported at module level, unused
here), and ``torchaudio.info`` / ``torchaudio.load`` read through soundfile with torchaudio's meaning
of ``frame_offset`` and ``num_frames`` (torchaudio 2.11 has no ``info`` and loads only through
torchcodec, which is not installed).
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import types
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from asr.data.audio import cut_waveform
from asr.data.importers import import_wenet

MIRROR = Path(os.environ.get("WENET_MIRROR", "/work/.mirror/wenet-e2e+wenet/repo"))
WENET_SRC = os.environ.get("WENET_SRC")
PROCESSOR = "wenet/dataset/processor.py"
TOKENIZER = "wenet/text/base_tokenizer.py"


@pytest.fixture
def wenet_source(tmp_path) -> Path:
    """A folder holding Wenet's processor.py and base_tokenizer.py."""
    if WENET_SRC and (Path(WENET_SRC) / PROCESSOR).is_file():
        return Path(WENET_SRC)
    if not MIRROR.is_dir() or shutil.which("git") is None:
        pytest.skip(f"Wenet's source is not here: no mirror at {MIRROR} (set WENET_MIRROR) and no WENET_SRC checkout")
    out = tmp_path / "wenet_src"
    out.mkdir()
    archive = subprocess.run(["git", f"--git-dir={MIRROR}", "archive", "HEAD", PROCESSOR, TOKENIZER],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True)
    return out


def _sf_info(path):
    return types.SimpleNamespace(sample_rate=sf.info(path).samplerate)


def _sf_load(path, frame_offset: int = 0, num_frames: int = -1):
    """torchaudio.load's result, (channels, n) float32 in [-1, 1], read with soundfile."""
    with sf.SoundFile(path) as f:
        f.seek(frame_offset)
        data = f.read(frames=num_frames, dtype="float32", always_2d=True)
        return torch.from_numpy(data.T.copy()), f.samplerate


@pytest.fixture
def decode_wav(wenet_source, monkeypatch):
    """Wenet's ``processor.decode_wav``, loaded from ``wenet_source`` with the module docstring's shims."""
    import torchaudio

    langid = types.ModuleType("langid")
    langid_langid = types.ModuleType("langid.langid")
    langid_langid.model = None
    langid_langid.LanguageIdentifier = types.SimpleNamespace(from_modelstring=lambda *a, **k: None)
    wenet = types.ModuleType("wenet")
    wenet.__path__ = [str(wenet_source / "wenet")]
    stubs = {"librosa": types.ModuleType("librosa"), "langid": langid, "langid.langid": langid_langid,
             "wenet": wenet}
    for name, module in stubs.items():
        monkeypatch.setitem(sys.modules, name, module)
    loaded_here = ("wenet.text", "wenet.text.base_tokenizer", "wenet.dataset", "wenet.dataset.processor")
    for name in loaded_here:
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setattr(torchaudio, "info", _sf_info, raising=False)
    monkeypatch.setattr(torchaudio, "load", _sf_load)
    # the stub package's path is the fetched source: Wenet's own module, imported by its name
    module = importlib.import_module(PROCESSOR.removesuffix(".py").replace("/", "."))
    yield module.decode_wav
    for name in loaded_here:
        sys.modules.pop(name, None)


def test_segments_hold_the_samples_wenet_reads(tmp_path, decode_wav):
    rng = np.random.default_rng(0)
    files = {"a.wav": (16000, 2.8), "b.wav": (8000, 1.5)}
    for name, (rate, seconds) in files.items():  # noise: a span off by one sample would not match
        sf.write(tmp_path / name, rng.uniform(-0.5, 0.5, int(rate * seconds)), rate, subtype="PCM_16")
    entries = [
        {"key": "whole", "wav": "a.wav", "txt": "all"},
        {"key": "head", "wav": "a.wav", "txt": "one", "start": 0.0, "end": 1.0},
        {"key": "ragged", "wav": "a.wav", "txt": "two", "start": 0.12345, "end": 0.98765},
        {"key": "thirds", "wav": "a.wav", "txt": "three", "start": 1 / 3, "end": 2 / 3},
        {"key": "tail", "wav": "a.wav", "txt": "four", "start": 2.2, "end": 2.8},
        {"key": "overshoot", "wav": "a.wav", "txt": "five", "start": 2.5, "end": 3.1},
        {"key": "narrow", "wav": "b.wav", "txt": "six", "start": 0.3333, "end": 1.23456},
        # times that fall past the middle of a sample: Wenet truncates them, rounding would not
        {"key": "truncated", "wav": "a.wav", "txt": "seven", "start": 1.00004, "end": 1.50006},
        {"key": "truncated8k", "wav": "b.wav", "txt": "eight", "start": 0.10008, "end": 0.9},
    ]
    lines = [json.dumps({**e, "wav": str(tmp_path / e["wav"])}) for e in entries]
    (tmp_path / "data.list").write_text("\n".join(lines) + "\n")
    skipped = Counter()
    cuts = import_wenet(tmp_path / "data.list", skipped)
    assert skipped == {} and list(cuts.ids) == [e["key"] for e in entries]
    for line in lines:
        theirs = decode_wav(dict(json.loads(line), file_name=str(tmp_path / "data.list")))
        cut = cuts[theirs["key"]]
        ours = cut_waveform(cut, target_sr=cut.recording.sampling_rate)  # (n,)
        assert theirs["sample_rate"] == cut.recording.sampling_rate
        assert ours.shape == theirs["wav"][0].shape, theirs["key"]
        assert torch.equal(ours, theirs["wav"][0]), theirs["key"]
        assert cut.supervisions[0].text == theirs["txt"]


def test_the_shim_reads_what_torchaudio_means_by_offset_and_count(tmp_path):
    data = np.arange(100, dtype=np.int16)
    sf.write(tmp_path / "ramp.wav", data, 16000, subtype="PCM_16")
    wave, rate = _sf_load(io.BytesIO((tmp_path / "ramp.wav").read_bytes()), frame_offset=10, num_frames=5)
    assert rate == 16000 and wave.shape == (1, 5)
    assert torch.equal(torch.round(wave * 32768).to(torch.int16)[0], torch.arange(10, 15, dtype=torch.int16))
