"""The feature store: fbank computed once equals fbank on the fly, and training reads it."""

import json
import shutil
from pathlib import Path

import pytest
import torch

import asr.data.cut_plan as cut_plan_module
import asr.data.dataset as dataset_module
from asr.data.augment import SpecAugment
from asr.data.audio import cut_waveform
from asr.data.datamodule import AsrDataModule
from asr.data.dataset import AsrDataset
from asr.data.feature_store import (
    STORE_INFO, build_store, ensure_store, load_stored, read_store, store_is_current, store_key,
)
from asr.data.features import FbankExtractor, FeatureConfig
from asr.data.importers import make_cut
from asr.data.manifest import read_cuts, write_cuts
from asr.data.tokenizer import load_tokenizer
from test_datamodule import _fake_recording


def _dm(corpus, tok, **kw):
    args = dict(max_duration=8.0, num_workers=0, speed_perturb=False, spec_augment=False, max_duration_per_utt=8.0)
    return AsrDataModule(str(corpus), str(tok), **{**args, **kw})


@pytest.fixture(scope="module")
def store(tiny_corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("store") / "cuts_train"
    info = build_store(tiny_corpus / "cuts_train.jsonl.gz", out, FbankExtractor(), workers=1, progress=False)
    return out, info


def test_stored_features_equal_the_extractor_on_the_audio(store, tiny_corpus):
    split_dir, info = store
    cuts = list(read_store(split_dir))
    assert [c.id for c in cuts] == [c.id for c in read_cuts(tiny_corpus / "cuts_train.jsonl.gz")]
    assert info["skipped"] == {} and info["frames"] == sum(c.features.num_frames for c in cuts)
    extractor = FbankExtractor()
    for cut in cuts:
        torch.testing.assert_close(load_stored(cut), extractor(cut_waveform(cut)), rtol=0, atol=0)


def test_two_worker_processes_store_the_same_features(store, tiny_corpus, tmp_path):
    split_dir, _ = store
    # Chunks of 4 cuts: several tasks, so the two spawned workers really share the corpus.
    build_store(tiny_corpus / "cuts_train.jsonl.gz", tmp_path / "two", FbankExtractor(), workers=2, progress=False,
                chunk_size=4)
    for one, two in zip(read_store(split_dir), read_store(tmp_path / "two"), strict=True):
        assert one.id == two.id
        torch.testing.assert_close(load_stored(one), load_stored(two), rtol=0, atol=0)


def test_store_moves_with_its_corpus(tiny_corpus, tmp_path):
    corpus = tmp_path / "corpus"
    shutil.copytree(tiny_corpus, corpus)
    build_store(corpus / "cuts_train.jsonl.gz", corpus / "fbank" / "cuts_train", FbankExtractor(), progress=False)
    moved = tmp_path / "moved"
    corpus.rename(moved)
    cut = next(iter(read_store(moved / "fbank" / "cuts_train")))
    torch.testing.assert_close(load_stored(cut), FbankExtractor()(cut_waveform(cut)), rtol=0, atol=0)


def test_store_of_other_options_or_another_manifest_is_rebuilt(tiny_corpus, tmp_path):
    source = write_cuts(read_cuts(tiny_corpus / "cuts_train.jsonl.gz"), tmp_path / "cuts_train.jsonl.gz")
    split_dir = tmp_path / "store"
    ensure_store(source, split_dir, FbankExtractor())
    assert store_is_current(split_dir, store_key(source, FbankExtractor()))
    other = FbankExtractor(FeatureConfig(num_mel_bins=40))
    assert not store_is_current(split_dir, store_key(source, other))
    ensure_store(source, split_dir, other)
    assert next(iter(read_store(split_dir))).features.num_features == 40
    assert json.loads((split_dir / STORE_INFO).read_text())["extractor"]["num_mel_bins"] == 40
    write_cuts(list(read_cuts(source))[:3], source)  # the split changed: the store must not be read
    assert not store_is_current(split_dir, store_key(source, other))


def test_datamodule_trains_from_the_store_on_the_same_batches(tiny_corpus, spm_dir, tmp_path):
    on_the_fly = list(_dm(tiny_corpus, spm_dir).train_dataloader())
    dm = _dm(tiny_corpus, spm_dir, feature_store=str(tmp_path / "fbank"))
    dm.prepare_data()
    assert (tmp_path / "fbank" / "cuts_train" / STORE_INFO).is_file()
    assert (tmp_path / "fbank" / "cuts_dev" / STORE_INFO).is_file()
    stored = list(dm.train_dataloader())
    assert [b.keys for b in stored] == [b.keys for b in on_the_fly]
    for a, b in zip(stored, on_the_fly):
        torch.testing.assert_close(a.feats, b.feats, rtol=0, atol=0)
        assert torch.equal(a.tokens, b.tokens)
    dev = [b.keys for b in dm.val_dataloader()]
    assert dev == [b.keys for b in _dm(tiny_corpus, spm_dir).val_dataloader()]


def test_speed_perturbation_and_spec_augment_on_stored_cuts(store, spm_dir, monkeypatch):
    split_dir, _ = store
    cuts = read_store(split_dir).subset(first=2)
    tokenizer = load_tokenizer(spm_dir)
    stored = [load_stored(c) for c in cuts]
    reads = []
    monkeypatch.setattr(dataset_module, "load_stored", lambda cut: reads.append(cut.id) or load_stored(cut))
    for speed, expect_store in ((1.0, True), (1.1, False)):
        reads.clear()
        monkeypatch.setattr(cut_plan_module, "random_speed", lambda rng: speed)
        ds = AsrDataset(tokenizer, FbankExtractor(), speed_perturb=True)
        batch, skipped, _ = ds[cuts]
        assert skipped == []
        assert bool(reads) == expect_store
        lens = batch.feat_lens.tolist()
        if expect_store:
            assert lens == [f.shape[0] for f in stored]
        else:  # played 1.1x faster: fewer frames, computed from the audio
            assert all(n < f.shape[0] for n, f in zip(lens, stored))
    monkeypatch.setattr(cut_plan_module, "random_speed", lambda rng: 1.0)
    torch.manual_seed(0)
    batch, _, _ = AsrDataset(tokenizer, FbankExtractor(), spec_augment=SpecAugment())[cuts]
    masked = batch.feats[0, : stored[0].shape[0]]
    assert masked.shape == stored[0].shape and not torch.equal(masked, stored[0])


def test_unreadable_audio_is_counted_at_build_and_skipped_in_training(tiny_corpus, char_dir, tmp_path):
    good = list(read_cuts(tiny_corpus / "cuts_train.jsonl.gz"))[:3]
    text = good[0].supervisions[0].text
    write_cuts(good + [make_cut("missing", _fake_recording("missing", tmp_path / "nope.wav"), text)],
               tmp_path / "cuts_train.jsonl.gz")
    write_cuts(good, tmp_path / "cuts_dev.jsonl.gz")
    dm = _dm(tmp_path, char_dir, feature_store=str(tmp_path / "fbank"), max_duration=30.0)
    dm.prepare_data()
    info = json.loads((tmp_path / "fbank" / "cuts_train" / STORE_INFO).read_text())
    assert info["skipped"] == {"audio_missing": 1}
    seen = [k for b in dm.train_dataloader() for k in b.keys]
    assert sorted(seen) == sorted(c.id for c in good)
    assert dm.skip_report() == {"audio_missing": 1}
    # a stored file that disappeared later is a counted skip too, not a crash
    victim = next(c for c in read_store(tmp_path / "fbank" / "cuts_train") if c.id == good[0].id)
    (Path(victim.features.storage_path) / victim.features.storage_key).unlink()
    dm = _dm(tmp_path, char_dir, feature_store=str(tmp_path / "fbank"), max_duration=30.0)
    seen = [k for b in dm.train_dataloader() for k in b.keys]
    assert good[0].id not in seen
    assert dm.skip_report() == {"audio_missing": 1, "features_unreadable": 1}


def test_feature_store_with_shar_is_refused(tiny_corpus, spm_dir, tmp_path):
    with pytest.raises(ValueError, match="feature_store"):
        _dm(tiny_corpus, spm_dir, feature_store=str(tmp_path), shar_dir=str(tmp_path))
