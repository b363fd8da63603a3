"""Lazy manifests: same batches as an in-memory read, size sidecars, progress estimate, read summary."""

import gzip
import math
from types import SimpleNamespace

import pytest

from asr.data.datamodule import AsrDataModule
from asr.data.manifest import CorpusStats, manifest_stats, read_cuts, stats_path, write_cuts
from asr.train.progress import EstimatedTotalProgressBar


def _dm(corpus, tok, **kw):
    args = dict(max_duration=8.0, num_workers=0, speed_perturb=False, spec_augment=False, max_duration_per_utt=8.0,
                num_buckets=2)
    args.update(kw)
    return AsrDataModule(str(corpus), str(tok), **args)


def _epoch_keys(dm, epochs=2):
    """Cut ids of every batch the train sampler draws (the loader turns exactly these into audio)."""
    sampler = dm.train_dataloader().sampler
    keys = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        keys.append([[c.id for c in cuts] for cuts in sampler])
    return keys


def test_lazy_reading_gives_the_same_batches_as_reading_into_memory(tiny_corpus, spm_dir):
    lazy = _dm(tiny_corpus, spm_dir, lazy=True)
    eager = _dm(tiny_corpus, spm_dir, lazy=False)
    lazy_keys, eager_keys = _epoch_keys(lazy), _epoch_keys(eager)
    assert lazy_keys == eager_keys
    assert lazy_keys[0] != lazy_keys[1]  # epochs are shuffled differently
    assert lazy.train_dataloader().sampler.sampler.cuts[0].is_lazy


def test_read_cuts_lazy_resolves_paths_like_the_eager_read(tiny_corpus):
    path = tiny_corpus / "cuts_train.jsonl.gz"
    lazy, eager = read_cuts(path, lazy=True), read_cuts(path)
    assert lazy.is_lazy and not eager.is_lazy
    lazy_list = list(lazy)
    assert [c.to_dict() for c in lazy_list] == [c.to_dict() for c in eager]
    assert all(c.recording.sources[0].source.startswith(str(tiny_corpus)) for c in lazy_list)


def test_write_cuts_leaves_a_stats_sidecar_and_stats_fall_back_to_counting(tiny_corpus, tmp_path):
    cuts = list(read_cuts(tiny_corpus / "cuts_dev.jsonl.gz"))
    path = write_cuts(iter(cuts), tmp_path / "cuts_x.jsonl.gz")  # a one-pass iterator is enough
    expected = CorpusStats(len(cuts), sum(c.duration for c in cuts))
    assert manifest_stats(path) == expected
    stats_path(path).unlink()
    counted = manifest_stats(path)
    assert counted.cuts == expected.cuts and math.isclose(counted.seconds, expected.seconds)
    with gzip.open(path, "rt") as f:
        assert sum(1 for _ in f) == len(cuts)


def test_estimate_and_read_summary(tiny_corpus, spm_dir):
    dm = _dm(tiny_corpus, spm_dir)
    cuts = list(read_cuts(tiny_corpus / "cuts_train.jsonl.gz"))
    total = sum(c.duration for c in cuts)
    assert dm.estimated_batches_per_epoch() == math.ceil(total / 8.0)
    assert _dm(tiny_corpus, spm_dir, world_size=2, rank=0).estimated_batches_per_epoch() == math.ceil(total / 16.0)
    batches = list(dm.train_dataloader())
    summary = dm.read_summary()
    assert summary["cuts"] == sum(len(b.keys) for b in batches) == len(cuts)
    assert summary["hours"] == pytest.approx(total / 3600)
    # the estimate is a lower bound on the batches: dynamic batches are at most max_duration long
    assert len(batches) >= dm.estimated_batches_per_epoch()


def _bar_for(dm, max_steps=-1, global_step=0):
    bar = EstimatedTotalProgressBar()
    bar._trainer = SimpleNamespace(max_steps=max_steps, global_step=global_step, max_epochs=3, current_epoch=0,
                                   num_training_batches=float("inf"), datamodule=dm)
    return bar


def test_progress_bar_total_is_the_estimate_capped_by_the_steps_left(tiny_corpus, spm_dir):
    dm = _dm(tiny_corpus, spm_dir)
    estimate = dm.estimated_batches_per_epoch()
    assert estimate > 2
    assert _bar_for(dm).total_train_batches == estimate
    assert _bar_for(dm, max_steps=10, global_step=8).total_train_batches == 2
    assert _bar_for(None, max_steps=10, global_step=4).total_train_batches == 6
    assert _bar_for(None).total_train_batches == float("inf")
