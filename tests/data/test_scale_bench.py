"""bench_data.py --scale: the scaled manifests point at a few real audio files; Shar only up to its limit."""

from pathlib import Path

from asr.data.manifest import manifest_stats, read_cuts
from asr.data.scale_bench import HEADER, build_scale_corpus, format_row


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
