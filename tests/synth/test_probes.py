"""The length probe set: deterministic, lengths near their targets, held-out voices."""

from __future__ import annotations

import soundfile as sf

from asr.synth.probes import PROBE_FILE, build_probe_set
from asr.synth.voices import split_voices


def _content(cuts, root):
    return [(c.id, c.supervisions[0].text, sf.read(root / c.recording.sources[0].source, dtype="int16")[0].tobytes())
            for c in cuts]


def test_probe_set_is_deterministic_and_near_its_target_lengths(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    cuts = build_probe_set(one, seed=7, lengths=(5, 12), per_length=3, workers=1)
    again = build_probe_set(two, seed=7, lengths=(12, 5), per_length=3, workers=2)
    assert [c.id for c in cuts] == [f"probe005-00{i}" for i in range(3)] + [f"probe012-00{i}" for i in range(3)]
    assert _content(cuts, one) == _content(again, two)
    assert (one / PROBE_FILE).is_file()
    held_out = set(split_voices("test"))
    for cut in cuts:
        target = cut.custom["probe_seconds"]
        assert abs(cut.duration - target) <= 0.1 * target, (cut.id, cut.duration)
        assert cut.custom["voice"] in held_out
    other_seed = build_probe_set(tmp_path / "three", seed=8, lengths=(5,), per_length=1, workers=1)
    assert other_seed[0].supervisions[0].text != cuts[0].supervisions[0].text


def test_dev_probe_set_is_read_by_dev_voices_from_its_own_stream(tmp_path):
    from asr.synth.probes import DEV_PROBE_FILE

    test = build_probe_set(tmp_path, seed=7, lengths=(5,), per_length=2, workers=1)
    dev = build_probe_set(tmp_path, seed=7, lengths=(5,), per_length=2, workers=1, voices="dev")
    assert (tmp_path / DEV_PROBE_FILE).is_file() and (tmp_path / PROBE_FILE).is_file()
    assert [c.id for c in dev] == [c.id for c in test]  # same ids, other files and audio folders
    assert all(c.recording.sources[0].source.startswith("audio/probe_dev/") for c in dev)
    assert {c.custom["voice"] for c in dev} <= set(split_voices("dev"))
    assert [c.supervisions[0].text for c in dev] != [c.supervisions[0].text for c in test]
