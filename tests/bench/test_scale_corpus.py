"""bench_data.py --scale: the scaled manifests point at a few real audio files; Shar only up to its limit."""

import tarfile
from pathlib import Path

import numpy as np
from lhotse import CutSet

from asr.data.manifest import manifest_stats, read_cuts
from asr.bench.scale_corpus import HEADER, _scaled, _templates, build_scale_corpus, format_row, write_scale_shar
from asr.data.shar import write_shar


def test_scale_corpus_repeats_a_few_real_files(tiny_corpus, tmp_path):
    built = build_scale_corpus(tiny_corpus / "cuts_train.jsonl.gz", tmp_path, [30, 12], shar_max_cuts=12,
                               audio_files=4)
    assert sorted(built) == [12, 30] and "shar" in built[12] and "shar" not in built[30]
    cuts = list(read_cuts(built[30]["manifest"]))
    assert manifest_stats(built[30]["manifest"]).cuts == len(cuts) == len({c.id for c in cuts}) == 30
    files = {c.recording.sources[0].source for c in cuts}
    assert len(files) == 4 and all(Path(f).is_file() for f in files)
    assert all(0.6 <= round(c.duration, 6) <= 1.2 for c in cuts)
    assert len(format_row(30, "lazy", {"first_batch_s": 1.0, "main_peak_mb": 500, "worker_peak_mb": 400})) \
        == len(HEADER)
    assert "n/a" in format_row(30, "shar", None)


def test_scale_shar_equals_lhotses_writer_on_the_same_cuts(tiny_corpus, tmp_path):
    """Each template encoded once and copied under every id: the shards write_shar would give."""
    templates = _templates(tiny_corpus / "cuts_train.jsonl.gz", 3)
    n = 25
    fast, slow = tmp_path / "fast", tmp_path / "slow"
    stats = write_scale_shar(templates, n, fast, shard_size=10)
    write_shar(_scaled(templates, n), slow, shard_size=10)
    assert sorted(p.name for p in fast.iterdir()) == sorted(p.name for p in slow.iterdir())
    assert stats.cuts == n and abs(stats.seconds - sum(c.duration for c in _scaled(templates, n))) < 1e-6
    for shard in range(3):
        with tarfile.open(fast / f"recording.{shard:06d}.tar") as a, tarfile.open(slow / f"recording.{shard:06d}.tar") as b:
            assert [(m.name, a.extractfile(m).read()) for m in a.getmembers()] == \
                [(m.name, b.extractfile(m).read()) for m in b.getmembers()]
    read_fast = list(CutSet.from_shar(in_dir=fast))
    read_slow = list(CutSet.from_shar(in_dir=slow))
    assert [_without_origin(c) for c in read_fast] == [_without_origin(c) for c in read_slow]
    assert len({c.id for c in read_fast}) == n
    for a, b in zip(read_fast[::7], read_slow[::7]):
        np.testing.assert_array_equal(a.load_audio(), b.load_audio())


def _without_origin(cut) -> dict:
    """The cut as a dict, less the reader's note of which folder it came from."""
    record = cut.to_dict()
    record["custom"] = {k: v for k, v in record.get("custom", {}).items() if k != "shard_origin"}
    return record
