"""Lhotse Shar: writing shards, per-rank per-epoch shard split, training batches from shards."""

import math

import pytest
import torch

from asr.data.audio import cut_waveform
from asr.data.datamodule import AsrDataModule
from asr.data.manifest import read_cuts
from asr.data.shar import RankShardedShar, shar_stats, shard_paths, write_shar
from asr.prepare import PrepareOptions, prepare_corpus



def test_shards_hold_every_cut_with_its_audio(tiny_corpus, tiny_shar):
    cuts = list(read_cuts(tiny_corpus / "cuts_train.jsonl.gz"))
    paths = shard_paths(tiny_shar)
    assert len(paths["cuts"]) == len(paths["recording"]) == -(-len(cuts) // 4)
    stats = shar_stats(tiny_shar)
    assert stats.cuts == len(cuts) and stats.seconds == pytest.approx(sum(c.duration for c in cuts))
    read_back = {c.id: c for c in RankShardedShar(tiny_shar, seed=0)}
    assert set(read_back) == {c.id for c in cuts}
    for cut in cuts[:3]:
        # flac is lossless and the synth audio is 16-bit: the samples come back exactly
        assert torch.equal(cut_waveform(read_back[cut.id]), cut_waveform(cut))
        assert read_back[cut.id].supervisions[0].text == cut.supervisions[0].text


def test_write_shar_refuses_a_folder_with_files(tiny_shar, tiny_corpus):
    with pytest.raises(FileExistsError, match="not empty"):
        write_shar(read_cuts(tiny_corpus / "cuts_dev.jsonl.gz"), tiny_shar)


def test_ranks_read_disjoint_shards_reshuffled_each_epoch(tiny_shar):
    n = len(shard_paths(tiny_shar)["cuts"])
    ranks = [RankShardedShar(tiny_shar, seed=5, world_size=2, rank=r) for r in (0, 1)]
    orders = []
    for epoch in range(4):
        mine = [r.shards_for_epoch(epoch) for r in ranks]
        assert len(mine[0]) == len(mine[1]) == n // 2 and not set(mine[0]) & set(mine[1])
        orders.append(mine[0] + mine[1])
    assert len({tuple(o) for o in orders}) > 1  # a new order per epoch
    again = RankShardedShar(tiny_shar, seed=5, world_size=2, rank=0)
    assert [again.shards_for_epoch(e) for e in range(4)] == [o[: n // 2] for o in orders]  # seeded
    ranks[0].set_epoch(1)
    assert {c.shard_origin for c in ranks[0]} == {shard_paths(tiny_shar)["cuts"][i] for i in orders[1][: n // 2]}
    with pytest.raises(ValueError, match="shards for"):
        RankShardedShar(tiny_shar, seed=0, world_size=n + 1, rank=0)


def _dm(corpus, tok, shar, **kw):
    return AsrDataModule(str(corpus), str(tok), max_duration=8.0, num_workers=0, speed_perturb=False,
                         spec_augment=False, max_duration_per_utt=8.0, num_buckets=2, seed=3, shar_dir=str(shar),
                         **kw)


def test_training_batches_from_shar_cover_the_split_each_epoch(tiny_corpus, char_dir, tiny_shar):
    dm = _dm(tiny_corpus, char_dir, tiny_shar)
    loader = dm.train_dataloader()
    epochs = []
    for epoch in (0, 1):
        loader.sampler.set_epoch(epoch)
        epochs.append([b.keys for b in loader])
    expected = sorted(c.id for c in read_cuts(tiny_corpus / "cuts_train.jsonl.gz"))
    assert all(sorted(k for b in e for k in b) == expected for e in epochs)
    assert epochs[0] != epochs[1]
    assert dm.estimated_batches_per_epoch() == math.ceil(shar_stats(tiny_shar).seconds / 8.0)
    # the same seed draws the same batches
    again = _dm(tiny_corpus, char_dir, tiny_shar).train_dataloader()
    assert [b.keys for b in again] == epochs[0]


def test_prepare_data_writes_shar(tiny_corpus, tmp_path, capsys):
    wenet = tmp_path / "train.list"
    cuts = list(read_cuts(tiny_corpus / "cuts_dev.jsonl.gz"))
    wenet.write_text("".join(
        f'{{"key": "{c.id}", "wav": "{c.recording.sources[0].source}", "txt": "{c.supervisions[0].text}"}}\n'
        for c in cuts))
    prepare_corpus(PrepareOptions(corpus="wenet", src=[f"train={wenet}"], data_dir=str(tmp_path / "out"), units="char",
                                  workers=0, shar_dir=str(tmp_path / "shar"), shard_size=2))
    assert len(shard_paths(tmp_path / "shar")["cuts"]) == -(-len(cuts) // 2)
    assert {c.id for c in RankShardedShar(tmp_path / "shar", seed=0)} == {c.id for c in cuts}
    assert f"shar: {len(cuts)} cuts" in capsys.readouterr().out
