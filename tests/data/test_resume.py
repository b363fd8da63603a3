"""Exact mid-epoch resume: interrupted + resumed training sees the batches of an uninterrupted run."""

import json

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from asr.data.batch import Batch
from asr.data.datamodule import AsrDataModule
from asr.data.dataset import new_skip_registry
from asr.data.loader import ResumableSampler, SkipCountingLoader, TrainPosition


class KeyRecorder(L.LightningModule):
    """Records the cut ids of every training batch; a linear layer gives the optimizer something to do."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(80, 2)
        self.keys: list[list[str]] = []

    def training_step(self, batch, _):
        self.keys.append(list(batch.keys))
        return self.lin(batch.feats).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _dm(corpus, tok, workers, shar_dir=None):
    return AsrDataModule(str(corpus), str(tok), max_duration=8.0, num_workers=workers, speed_perturb=False,
                         spec_augment=False, max_duration_per_utt=8.0, num_buckets=2, seed=7,
                         shar_dir=str(shar_dir) if shar_dir else None)


def _fit(corpus, tok, workers, tmp, max_steps=-1, ckpt_path=None, save_every=None, shar=None):
    module = KeyRecorder()
    callbacks = []
    if save_every:
        callbacks.append(ModelCheckpoint(dirpath=tmp, filename="interrupted", every_n_train_steps=save_every,
                                         save_top_k=-1))
    trainer = L.Trainer(max_epochs=2, max_steps=max_steps, accelerator="cpu", logger=False,
                        enable_checkpointing=bool(save_every), callbacks=callbacks, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0,
                        default_root_dir=tmp)
    trainer.fit(module, datamodule=_dm(corpus, tok, workers, shar), ckpt_path=ckpt_path)
    return module.keys


@pytest.mark.parametrize("workers, stop_in_epoch, use_shar", [(0, 0, False), (2, 1, False), (0, 1, True)])
def test_interrupted_and_resumed_run_sees_the_uninterrupted_batches(tiny_corpus, char_dir, tmp_path, workers,
                                                                   stop_in_epoch, use_shar, request):
    shar = request.getfixturevalue("tiny_shar") if use_shar else None
    full = _fit(tiny_corpus, char_dir, workers, tmp_path / "full", shar=shar)
    per_epoch = len(full) // 2
    assert per_epoch >= 4 and len({k for b in full for k in b}) > 0
    stop = stop_in_epoch * per_epoch + 2  # mid-epoch; with workers the loader has fetched batches past it
    first = _fit(tiny_corpus, char_dir, workers, tmp_path / "a", max_steps=stop, save_every=stop, shar=shar)
    ckpt = tmp_path / "a" / "interrupted.ckpt"
    state = torch.load(ckpt, weights_only=False)["AsrDataModule"]
    assert state["train_position"]["epoch"] == stop_in_epoch and state["train_position"]["yielded"] == 2
    resumed = _fit(tiny_corpus, char_dir, workers, tmp_path / "b", ckpt_path=ckpt, shar=shar)
    assert first == full[:stop]
    assert resumed == full[stop:]  # no batch repeated, none skipped, same order


class _FakeLoader:
    """Stands in for a DataLoader over a sampler: one (Batch, skipped, seconds) per sampler batch."""

    def __init__(self, sampler, bad: set[str]):
        self.sampler, self.dataset, self.bad = sampler, None, bad

    def __iter__(self):
        for cuts in self.sampler:
            good = [c for c in cuts if c not in self.bad]
            feats = [torch.zeros(3, 80) for _ in good]
            batch = Batch.collate(feats, [[1]] * len(good), good, good)
            yield batch, [("audio_corrupt", c) for c in cuts if c in self.bad], float(len(good))


class _ListSampler:
    def __init__(self, batches):
        self.batches, self.epoch = batches, 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __iter__(self):
        return iter(self.batches)


def test_position_counts_sampler_batches_that_were_dropped():
    batches = [["a"], ["bad1"], ["b", "c"], ["bad2"], ["d"]]
    sampler = ResumableSampler(_ListSampler(batches))
    loader = SkipCountingLoader(_FakeLoader(sampler, {"bad1", "bad2"}), new_skip_registry())
    seen = [b.keys for b in loader]
    assert seen == [["a"], ["b", "c"], ["d"]]
    # after 2 trained batches the sampler had drawn 3 (the all-bad one between them)
    assert loader.position_after(2) == TrainPosition(0, 3, 2)
    assert loader.position_after(0) == TrainPosition(0, 0, 0)
    with pytest.raises(ValueError, match="unknown"):
        loader.position_after(4)

    resumed = SkipCountingLoader(_FakeLoader(sampler, {"bad1", "bad2"}), new_skip_registry())
    resumed.resume_at(TrainPosition(0, 3, 2))
    assert [b.keys for b in resumed] == [["d"]]
    assert resumed.position_after(3) == TrainPosition(0, 5, 3)
    assert [b.keys for b in resumed] == seen  # the resume point is used once


def test_resume_point_past_the_end_of_the_epoch_is_an_error():
    sampler = ResumableSampler(_ListSampler([["a"], ["b"]]))
    sampler.skip_next(5)
    with pytest.raises(ValueError, match="past the end of epoch 0"):
        list(sampler)


def test_a_position_saved_with_another_world_size_restarts_the_epoch(tiny_corpus, char_dir):
    dm = _dm(tiny_corpus, char_dir, 0)
    dm.load_state_dict({"train_position": TrainPosition(0, 2, 2).to_dict(), "world_size": 2, "seed": 7})
    assert dm._resume_position is None
    dm.load_state_dict({"train_position": TrainPosition(0, 2, 2).to_dict(), "world_size": 1, "seed": 7})
    assert dm._resume_position == TrainPosition(0, 2, 2)


class RankKeyRecorder(KeyRecorder):
    """KeyRecorder that writes its keys to ``<out>/keys_rank<r>.json`` (spawned ranks return nothing)."""

    def __init__(self, out):
        super().__init__()
        self.out = out

    def on_train_end(self):
        (self.out / f"keys_rank{self.global_rank}.json").write_text(json.dumps(self.keys))


def _fit_ddp(corpus, tok, out, max_steps=-1, ckpt_path=None, save_every=None):
    out.mkdir(parents=True, exist_ok=True)
    callbacks = []
    if save_every:
        callbacks.append(ModelCheckpoint(dirpath=out, filename="interrupted", every_n_train_steps=save_every,
                                         save_top_k=-1))
    trainer = L.Trainer(max_epochs=2, max_steps=max_steps, accelerator="cpu", devices=2, strategy="ddp_spawn",
                        logger=False, enable_checkpointing=bool(save_every), callbacks=callbacks,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                        limit_val_batches=0, default_root_dir=out, use_distributed_sampler=False)
    trainer.fit(RankKeyRecorder(out), datamodule=_dm(corpus, tok, 0), ckpt_path=ckpt_path)
    return [json.loads((out / f"keys_rank{r}.json").read_text()) for r in (0, 1)]


# Minutes on the shared 2-core machine (three 2-process spawns); run with -m slow.
@pytest.mark.slow
def test_two_ranks_resume_exactly_with_gloo(tiny_corpus, char_dir, tmp_path):
    full = _fit_ddp(tiny_corpus, char_dir, tmp_path / "full")
    assert len(full[0]) == len(full[1]) >= 4
    first_epoch = [{k for b in keys[: len(keys) // 2] for k in b} for keys in full]
    assert first_epoch[0] and not first_epoch[0] & first_epoch[1]  # the ranks split the epoch's cuts
    stop = len(full[0]) // 2 + 1  # inside the second epoch
    first = _fit_ddp(tiny_corpus, char_dir, tmp_path / "a", max_steps=stop, save_every=stop)
    resumed = _fit_ddp(tiny_corpus, char_dir, tmp_path / "b", ckpt_path=tmp_path / "a" / "interrupted.ckpt")
    for rank in (0, 1):
        assert first[rank] + resumed[rank] == full[rank]


def _rank_loader(batches, monkeypatch, other_rank_batches):
    """A 2-rank loader whose peer rank has ``other_rank_batches`` batches (the all-reduce is simulated)."""
    calls = []

    def all_have(have):
        calls.append(have)
        return have and len(calls) <= other_rank_batches

    monkeypatch.setattr("asr.data.loader._all_ranks_have_batch", all_have)
    sampler = ResumableSampler(_ListSampler(batches))
    return SkipCountingLoader(_FakeLoader(sampler, set()), new_skip_registry(), world_size=2,
                              stop_with_first_rank=True), calls


def test_ranks_with_uneven_data_end_the_epoch_together(monkeypatch):
    batches = [["a"], ["b"], ["c"], ["d"]]
    # the peer has 2 batches: this rank stops after 2 too, dropping its rest
    loader, calls = _rank_loader(batches, monkeypatch, other_rank_batches=2)
    assert [b.keys for b in loader] == [["a"], ["b"]]
    assert calls == [True, True, True]  # the third all-reduce said "someone is out"
    # the peer has more: this rank, out first, joins the peer's pending all-reduce with "no batch"
    loader, calls = _rank_loader(batches, monkeypatch, other_rank_batches=9)
    assert [b.keys for b in loader] == batches
    assert calls == [True, True, True, True, False]
