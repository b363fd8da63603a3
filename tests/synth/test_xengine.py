"""The xengine split: test transcripts read by another engine (flite), evaluation only."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import soundfile as sf

from asr.data.dataset import cut_text
from asr.data.features import SAMPLE_RATE
from asr.data.manifest import read_cuts
from asr.synth.xengine import XENGINE_FILE, build_xengine_split, render_flite


def _copy_corpus(tiny_corpus, tmp_path):
    """A writable copy of the tiny corpus's test split (the session corpus stays untouched)."""
    out = tmp_path / "corpus"
    (out / "audio").mkdir(parents=True)
    shutil.copy(tiny_corpus / "cuts_test.jsonl.gz", out / "cuts_test.jsonl.gz")
    return out


def fake_render(text, voice):
    """A renderer whose audio encodes (text, voice): 10 ms of a tone per character, pitch by voice."""
    if "fail" in voice:
        raise RuntimeError("voice not found")
    n = 160 * len(text)
    freq = {"awb": 200.0, "rms": 300.0}.get(voice, 400.0)
    return (8000 * np.sin(2 * np.pi * freq * np.arange(n) / SAMPLE_RATE)).astype(np.int16)


def test_xengine_split_reads_every_test_transcript_with_every_voice(tiny_corpus, tmp_path):
    out = _copy_corpus(tiny_corpus, tmp_path)
    test = list(read_cuts(out / "cuts_test.jsonl.gz", out))
    result = build_xengine_split(out, voices=("awb", "rms"), render=fake_render)
    assert not result.skipped and (out / XENGINE_FILE).is_file()
    written = list(read_cuts(out / XENGINE_FILE, out))
    assert [c.id for c in written] == [f"xengine-{v}-{c.id}" for v in ("awb", "rms") for c in test]
    by_source = {c.id: c for c in test}
    for cut in written:
        source = by_source[cut.custom["source_cut"]]
        assert cut_text(cut) == cut_text(source)  # the same sentence, another engine
        assert cut.custom["engine"] == "flite" and cut.supervisions[0].speaker == f"flite-{cut.custom['voice']}"
        audio, rate = sf.read(out / cut.recording.sources[0].source, dtype="int16")
        assert rate == SAMPLE_RATE and np.array_equal(audio, fake_render(cut_text(cut), cut.custom["voice"]))
        assert cut.duration == pytest.approx(len(audio) / SAMPLE_RATE)


def test_the_dev_sentences_go_to_their_own_manifest(tiny_corpus, tmp_path):
    out = _copy_corpus(tiny_corpus, tmp_path)
    shutil.copy(tiny_corpus / "cuts_dev.jsonl.gz", out / "cuts_dev.jsonl.gz")
    dev = list(read_cuts(out / "cuts_dev.jsonl.gz", out))
    result = build_xengine_split(out, voices=("rms",), source_split="dev", render=fake_render)
    assert (out / "cuts_xengine_dev.jsonl.gz").is_file() and not (out / XENGINE_FILE).exists()
    assert [c.custom["source_cut"] for c in result.cuts] == [c.id for c in dev]


def test_a_failing_voice_is_counted_not_fatal(tiny_corpus, tmp_path):
    out = _copy_corpus(tiny_corpus, tmp_path)
    n_test = len(list(read_cuts(out / "cuts_test.jsonl.gz", out)))
    result = build_xengine_split(out, voices=("awb", "fail"), render=fake_render)
    assert result.skipped == {"render_failed": n_test}
    assert len(result.cuts) == n_test and all(c.custom["voice"] == "awb" for c in result.cuts)


def test_missing_test_split_says_what_to_run(tmp_path):
    with pytest.raises(FileNotFoundError, match="prepare_data.py"):
        build_xengine_split(tmp_path, render=fake_render)


@pytest.mark.skipif(shutil.which("flite") is None, reason="flite is not installed (apt-get install -y flite)")
def test_flite_renders_the_text_deterministically_at_the_corpus_rate():
    one = render_flite("three thousand and thirty one recipes", "awb")
    two = render_flite("three thousand and thirty one recipes", "awb")
    other = render_flite("three thousand and thirty one recipes", "rms")
    assert one.dtype == np.int16 and np.array_equal(one, two)
    assert 1.0 < len(one) / SAMPLE_RATE < 5.0 and np.abs(one).max() > 1000  # speech, not silence
    assert not np.array_equal(one[: len(other)], other[: len(one)])  # another voice
    with pytest.raises(ValueError, match="flite has no voice 'no_such_voice_xyz'; it has .*awb"):
        render_flite("hello", "no_such_voice_xyz")  # flite alone would read it with its default voice
