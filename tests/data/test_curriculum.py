"""The curriculum by epoch (asr.data.curriculum): epoch 0 reads the clean manifest, later epochs the main
one (or, mixed, both interleaved); a run resumed inside either stage continues with the uninterrupted run's
batches; bad options fail when the data module is built."""

from __future__ import annotations

import math
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from asr.data.curriculum import EpochShare, mixed_cuts
from asr.data.datamodule import AsrDataModule
from asr.data.manifest import read_cuts, write_cuts
from asr.synth.clean_copy import CLEAN_MANIFEST, clean_copy_id



class EpochKeyRecorder(L.LightningModule):
    """Records the epoch and cut ids of every training batch; a linear layer gives the optimizer work."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(80, 2)
        self.keys: list[list[str]] = []
        self.epochs: list[int] = []

    def training_step(self, batch, _):
        self.keys.append(list(batch.keys))
        self.epochs.append(self.current_epoch)
        return self.lin(batch.feats).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


@pytest.fixture(scope="module")
def clean_manifest(tiny_corpus, tmp_path_factory) -> Path:
    """Two thirds of the tiny train split under clean-copy ids (absolute audio paths), so its epochs are
    shorter than the main manifest's and every key says which manifest it came from."""
    cuts = list(read_cuts(tiny_corpus / "cuts_train.jsonl.gz"))
    out = tmp_path_factory.mktemp("clean") / CLEAN_MANIFEST
    write_cuts([c.with_id(clean_copy_id(c.id)) for c in cuts[: 2 * len(cuts) // 3]], out)
    return out


def _ids_by_epoch(run: EpochKeyRecorder) -> dict[int, list[str]]:
    """The cut ids of each epoch in the order they were trained on."""
    return {e: [k for keys, ep in zip(run.keys, run.epochs) if ep == e for k in keys] for e in range(3)}


def _dm(corpus, tok, clean, epochs=1, **overrides):
    options = dict(max_duration=8.0, num_workers=0, speed_perturb=False, spec_augment=False,
                   max_duration_per_utt=8.0, num_buckets=2, seed=7, curriculum_cuts=str(clean) if clean else None,
                   curriculum_epochs=epochs)
    return AsrDataModule(str(corpus), str(tok), **{**options, **overrides})


def _fit(dm, tmp, max_steps=-1, ckpt_path=None, save_every=None) -> EpochKeyRecorder:
    module = EpochKeyRecorder()
    callbacks = [ModelCheckpoint(dirpath=tmp, filename="interrupted", every_n_train_steps=save_every,
                                 save_top_k=-1)] if save_every else []
    trainer = L.Trainer(max_epochs=3, max_steps=max_steps, accelerator="cpu", logger=False,
                        enable_checkpointing=bool(save_every), callbacks=callbacks, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0,
                        default_root_dir=tmp)
    trainer.fit(module, datamodule=dm, ckpt_path=ckpt_path)
    return module


@pytest.fixture(scope="module")
def full_run(tiny_corpus, char_dir, clean_manifest, tmp_path_factory) -> EpochKeyRecorder:
    return _fit(_dm(tiny_corpus, char_dir, clean_manifest), tmp_path_factory.mktemp("full"))


def test_epoch_zero_reads_the_clean_manifest_and_later_epochs_the_main_one(full_run, tiny_corpus, clean_manifest):
    by_epoch = _ids_by_epoch(full_run)
    clean_ids = {c.id for c in read_cuts(clean_manifest)}
    main_ids = {c.id for c in read_cuts(tiny_corpus / "cuts_train.jsonl.gz")}
    assert sorted(by_epoch[0]) == sorted(clean_ids)  # every clean copy once, nothing else
    assert sorted(by_epoch[1]) == sorted(main_ids) and sorted(by_epoch[2]) == sorted(main_ids)
    assert by_epoch[1] != by_epoch[2]  # the main sampler reshuffles per epoch


@pytest.mark.parametrize("stop_epoch", [0, 1])
def test_a_run_resumed_in_either_stage_sees_the_uninterrupted_batches(full_run, tiny_corpus, char_dir,
                                                                    clean_manifest, tmp_path, stop_epoch):
    stop = full_run.epochs.index(stop_epoch) + 2  # two batches into the epoch
    assert full_run.epochs[stop - 1] == stop_epoch
    first = _fit(_dm(tiny_corpus, char_dir, clean_manifest), tmp_path / "a", max_steps=stop, save_every=stop)
    ckpt = tmp_path / "a" / "interrupted.ckpt"
    position = torch.load(ckpt, weights_only=False)["AsrDataModule"]["train_position"]
    assert (position["epoch"], position["yielded"]) == (stop_epoch, 2)
    resumed = _fit(_dm(tiny_corpus, char_dir, clean_manifest), tmp_path / "b", ckpt_path=ckpt)
    assert first.keys == full_run.keys[:stop]
    assert resumed.keys == full_run.keys[stop:]


@pytest.fixture(scope="module")
def mixed_run(tiny_corpus, char_dir, clean_manifest, tmp_path_factory) -> EpochKeyRecorder:
    # a bucketing buffer of 2 cuts: a chain of the two manifests would reach the sampler in its order
    return _fit(_dm(tiny_corpus, char_dir, clean_manifest, curriculum_mix=True, bucket_buffer_size=2),
                tmp_path_factory.mktemp("mixed"))


def test_mixed_later_epochs_read_both_manifests_interleaved(mixed_run, tiny_corpus, clean_manifest):
    by_epoch = _ids_by_epoch(mixed_run)
    clean_ids = {c.id for c in read_cuts(clean_manifest)}
    main_ids = {c.id for c in read_cuts(tiny_corpus / "cuts_train.jsonl.gz")}
    assert sorted(by_epoch[0]) == sorted(clean_ids)
    for epoch in (1, 2):
        ids = by_epoch[epoch]
        assert sorted(ids) == sorted(clean_ids | main_ids)  # every cut of both, once
        first_half = set(ids[: len(ids) // 2])
        assert first_half & clean_ids and first_half & main_ids  # interleaved, not main then clean
    assert by_epoch[1] != by_epoch[2]


def test_a_run_resumed_in_the_mixed_stage_sees_the_uninterrupted_batches(mixed_run, tiny_corpus, char_dir,
                                                                        clean_manifest, tmp_path):
    stop = mixed_run.epochs.index(1) + 2
    options = dict(curriculum_mix=True, bucket_buffer_size=2)
    first = _fit(_dm(tiny_corpus, char_dir, clean_manifest, **options), tmp_path / "a", max_steps=stop,
                 save_every=stop)
    resumed = _fit(_dm(tiny_corpus, char_dir, clean_manifest, **options), tmp_path / "b",
                   ckpt_path=tmp_path / "a" / "interrupted.ckpt")
    assert first.keys == mixed_run.keys[:stop]
    assert resumed.keys == mixed_run.keys[stop:]


@pytest.fixture(scope="module")
def half_mixed_run(tiny_corpus, char_dir, clean_manifest, tmp_path_factory) -> EpochKeyRecorder:
    return _fit(_dm(tiny_corpus, char_dir, clean_manifest, curriculum_mix=True, curriculum_mix_train_share=0.5,
                    bucket_buffer_size=2), tmp_path_factory.mktemp("half"))


def test_a_share_of_the_main_manifest_reads_a_new_subset_each_mixed_epoch(half_mixed_run, tiny_corpus,
                                                                          clean_manifest):
    by_epoch = _ids_by_epoch(half_mixed_run)
    clean_ids = {c.id for c in read_cuts(clean_manifest)}
    main = read_cuts(tiny_corpus / "cuts_train.jsonl.gz")
    main_ids = {c.id for c in main}
    kept = {}
    for epoch in (1, 2):
        ids = by_epoch[epoch]
        assert len(ids) == len(set(ids)) and clean_ids <= set(ids)  # every clean copy, each cut once
        kept[epoch] = set(ids) - clean_ids
        assert kept[epoch] < main_ids  # a proper subset of the main manifest
        share = EpochShare(0.5, seed=7)
        share.set_epoch(epoch)
        assert kept[epoch] == {c.id for c in main if share(c)}  # the filter of that epoch, nothing else
    assert kept[1] != kept[2]


def test_a_run_resumed_in_a_thinned_mixed_epoch_sees_the_uninterrupted_batches(half_mixed_run, tiny_corpus,
                                                                               char_dir, clean_manifest, tmp_path):
    stop = half_mixed_run.epochs.index(2) + 1
    options = dict(curriculum_mix=True, curriculum_mix_train_share=0.5, bucket_buffer_size=2)
    _fit(_dm(tiny_corpus, char_dir, clean_manifest, **options), tmp_path / "a", max_steps=stop, save_every=stop)
    resumed = _fit(_dm(tiny_corpus, char_dir, clean_manifest, **options), tmp_path / "b",
                   ckpt_path=tmp_path / "a" / "interrupted.ckpt")
    assert resumed.keys == half_mixed_run.keys[stop:]


def test_epoch_share_keeps_about_its_share_by_seed_epoch_and_id():
    class Cut:
        def __init__(self, cut_id):
            self.id = cut_id
    cuts = [Cut(f"utt{i}") for i in range(4000)]
    share = EpochShare(0.3, seed=1)
    kept = [c.id for c in cuts if share(c)]
    assert abs(len(kept) / len(cuts) - 0.3) < 0.03
    assert kept == [c.id for c in cuts if EpochShare(0.3, seed=1)(c)]  # no state beyond (seed, epoch, id)
    share.set_epoch(1)
    assert kept != [c.id for c in cuts if share(c)]
    assert kept != [c.id for c in cuts if EpochShare(0.3, seed=2)(c)]
    assert all(EpochShare(1.0, seed=1)(c) for c in cuts)


def test_estimated_batches_follow_the_curriculum_stage(tiny_corpus, char_dir, clean_manifest):
    from asr.data.manifest import manifest_stats
    main = manifest_stats(tiny_corpus / "cuts_train.jsonl.gz").seconds
    clean = manifest_stats(clean_manifest).seconds
    dm = _dm(tiny_corpus, char_dir, clean_manifest, curriculum_mix=True, curriculum_mix_train_share=0.5,
             max_duration=1.0, max_duration_per_utt=1.0)
    assert dm.estimated_batches_per_epoch(0) == math.ceil(clean)
    assert dm.estimated_batches_per_epoch(1) == math.ceil(main * 0.5 + clean)
    plain = _dm(tiny_corpus, char_dir, clean_manifest, max_duration=1.0, max_duration_per_utt=1.0)
    assert plain.estimated_batches_per_epoch(1) == math.ceil(main)


def test_mixed_cuts_holds_each_cut_once_in_a_seeded_order(tiny_corpus, clean_manifest):
    main = read_cuts(tiny_corpus / "cuts_train.jsonl.gz")
    clean = read_cuts(clean_manifest)
    sizes = (len(main), len(clean))
    orders = {seed: [c.id for c in mixed_cuts(main, clean, sizes, seed)] for seed in (0, 1)}
    assert sorted(orders[0]) == sorted([c.id for c in main] + [c.id for c in clean])
    assert orders[0] == [c.id for c in mixed_cuts(main, clean, sizes, 0)]  # the same seed, the same order
    assert orders[0] != orders[1]


def test_the_feature_store_holds_the_curriculum_manifest(tiny_corpus, char_dir, clean_manifest, tmp_path):
    dm = _dm(tiny_corpus, char_dir, clean_manifest, feature_store=str(tmp_path / "store"))
    assert dm._stored_splits() == ["cuts_train.jsonl.gz", str(clean_manifest), "cuts_dev.jsonl.gz"]
    assert dm._store_dir(str(clean_manifest)).name == "cuts_train_clean"


def test_bad_curriculum_options_fail_when_the_data_module_is_built(tiny_corpus, char_dir, clean_manifest,
                                                                   tiny_shar, tmp_path):
    with pytest.raises(ValueError, match="go together"):
        _dm(tiny_corpus, char_dir, clean_manifest, epochs=0)
    with pytest.raises(ValueError, match="go together"):
        _dm(tiny_corpus, char_dir, None, epochs=2)
    with pytest.raises(ValueError, match="go together"):
        _dm(tiny_corpus, char_dir, clean_manifest, epochs=-1)
    with pytest.raises(FileNotFoundError, match="curriculum_cuts: .*missing.*clean-copy profile"):
        _dm(tiny_corpus, char_dir, tmp_path / "nowhere.jsonl.gz")
    with pytest.raises(ValueError, match="Shar"):
        _dm(tiny_corpus, char_dir, clean_manifest, shar_dir=str(tiny_shar))
    with pytest.raises(ValueError, match="curriculum_mix_train_share must be in"):
        _dm(tiny_corpus, char_dir, clean_manifest, curriculum_mix=True, curriculum_mix_train_share=0.0)
    with pytest.raises(ValueError, match="needs curriculum_mix"):
        _dm(tiny_corpus, char_dir, clean_manifest, curriculum_mix_train_share=0.5)
    with pytest.raises(ValueError, match="curriculum_mix .*needs a curriculum"):
        _dm(tiny_corpus, char_dir, None, epochs=0, curriculum_mix=True)
