import numpy as np
import pytest
import soundfile as sf
import torch
from lhotse import AudioSource, Recording

from asr.data.batch import Batch
from asr.data.datamodule import AsrDataModule
from asr.data.importers import make_cut, make_recording
from asr.data.manifest import read_cuts, write_cuts
from tones import write_tone


def _dm(corpus, tok, **kw):
    args = dict(max_duration=8.0, num_workers=0, speed_perturb=False, spec_augment=False, max_duration_per_utt=8.0)
    args.update(kw)
    return AsrDataModule(str(corpus), str(tok), **args)


def _check_batch(batch: Batch, tokenizer):
    bsz = batch.feats.shape[0]
    assert batch.feats.dtype == torch.float32 and batch.feats.shape[2] == 80
    assert batch.feat_lens.dtype == batch.tokens.dtype == batch.token_lens.dtype == torch.int64
    assert len(batch.keys) == len(batch.texts) == bsz == batch.tokens.shape[0]
    assert int(batch.feat_lens.max()) == batch.feats.shape[1]
    assert int(batch.token_lens.max()) == batch.tokens.shape[1]
    for i in range(bsz):
        t, u = int(batch.feat_lens[i]), int(batch.token_lens[i])
        assert torch.all(batch.feats[i, t:] == 0)
        assert torch.all(batch.tokens[i, u:] == -1) and torch.all(batch.tokens[i, :u] >= 0)
        assert batch.tokens[i, :u].tolist() == tokenizer.encode(batch.texts[i])


def test_train_batches(tiny_corpus, spm_dir):
    dm = _dm(tiny_corpus, spm_dir, speed_perturb=True, spec_augment=True)
    durations = {c.id: c.duration for c in read_cuts(tiny_corpus / "cuts_train.jsonl.gz")}
    seen = []
    for batch in dm.train_dataloader():
        _check_batch(batch, dm.tokenizer)
        assert sum(durations[k] for k in batch.keys) <= 8.0
        seen += batch.keys
    assert sorted(seen) == sorted(durations)
    assert dm.skip_report() == {}


def test_eval_order_and_long_split(tiny_corpus, spm_dir):
    dm = _dm(tiny_corpus, spm_dir, max_duration=120.0)
    keys = [k for b in dm.test_dataloader("test") for k in b.keys]
    assert keys == [c.id for c in read_cuts(tiny_corpus / "cuts_test.jsonl.gz")]
    # the long split is never filtered by max_duration_per_utt
    long_batches = list(dm.test_dataloader("long"))
    assert long_batches and all(b.feats.shape[1] > 2000 for b in long_batches)


def test_two_ranks_see_disjoint_cuts(tiny_corpus, spm_dir):
    keys = []
    for rank in (0, 1):
        dm = _dm(tiny_corpus, spm_dir, max_duration=6.0, max_duration_per_utt=6.0, world_size=2, rank=rank)
        keys.append({k for b in dm.train_dataloader() for k in b.keys})
    assert keys[0] and keys[1] and not keys[0] & keys[1]


def _fake_recording(rec_id, path, seconds=1.0):
    n = int(seconds * 16000)
    return Recording(id=rec_id, sources=[AudioSource(type="file", channels=[0], source=str(path))],
                     sampling_rate=16000, num_samples=n, duration=seconds)


@pytest.fixture(scope="module")
def bad_corpus(tmp_path_factory, tiny_corpus):
    root = tmp_path_factory.mktemp("bad")
    good = list(read_cuts(tiny_corpus / "cuts_train.jsonl.gz"))[:3]
    (root / "corrupt.wav").write_bytes(b"RIFF garbage")
    sf.write(str(root / "empty.wav"), np.zeros(0, dtype=np.int16), 16000)
    write_tone(root / "short.wav", 0.01)  # 160 samples: no fbank frame
    write_tone(root / "stereo44k.wav", 1.2, sr=44100, channels=2)
    write_tone(root / "narrow8k.wav", 1.2, sr=8000)
    text = good[0].supervisions[0].text
    cuts = good + [
        make_cut("missing", _fake_recording("missing", root / "nope.wav"), text),
        make_cut("corrupt", _fake_recording("corrupt", root / "corrupt.wav"), text),
        make_cut("empty", _fake_recording("empty", root / "empty.wav"), text),
        make_cut("short", _fake_recording("short", root / "short.wav", 0.4), text),
        make_cut("notext", make_recording("notext", root / "narrow8k.wav"), "  "),
        make_cut("unknownchars", make_recording("unknownchars", root / "narrow8k.wav"), "中文"),
        make_cut("tooshort", make_recording("tooshort", root / "narrow8k.wav"), text, duration=0.1),
        make_cut("stereo", make_recording("stereo", root / "stereo44k.wav"), text),
        make_cut("narrow", make_recording("narrow", root / "narrow8k.wav"), text),
    ]
    write_cuts(cuts, root / "cuts_train.jsonl.gz")
    write_cuts(good, root / "cuts_dev.jsonl.gz")
    write_cuts([c for c in cuts if c.id in ("missing", "corrupt")], root / "cuts_allbad.jsonl.gz")
    return root, {c.id for c in good} | {"stereo", "narrow"}


@pytest.mark.parametrize("workers", [0, 2])
def test_bad_inputs_are_skipped_and_counted(bad_corpus, char_dir, workers):
    root, good_ids = bad_corpus
    dm = _dm(root, char_dir, num_workers=workers, max_duration=30.0)
    seen = {}
    for batch in dm.train_dataloader():
        _check_batch(batch, dm.tokenizer)
        seen.update(zip(batch.keys, batch.feat_lens.tolist()))
    assert set(seen) == good_ids
    assert seen["stereo"] == seen["narrow"] == 118  # 1.2 s resampled to 16 kHz -> 118 frames
    assert dm.skip_report() == {
        "audio_corrupt": 1, "audio_empty": 1, "audio_missing": 1, "audio_too_short": 1,
        "empty_text": 1, "too_short": 1, "untokenizable_text": 1,
    }
    # a second epoch does not double-count the same cuts
    list(dm.train_dataloader())
    assert dm.skip_report()["audio_missing"] == 1


def test_all_bad_batch_does_not_crash(bad_corpus, char_dir):
    root, _ = bad_corpus
    dm = _dm(root, char_dir, train_cuts="cuts_allbad.jsonl.gz")
    assert list(dm.train_dataloader()) == []
    assert dm.skip_report() == {"audio_corrupt": 1, "audio_missing": 1}


def test_constructor_validation(tiny_corpus, spm_dir):
    with pytest.raises(ValueError, match=r"max_duration_per_utt \(30.0\)"):
        AsrDataModule(str(tiny_corpus), str(spm_dir), max_duration=20.0, max_duration_per_utt=30.0)


def test_noise_mixing_runs(tiny_corpus, spm_dir):
    dm = _dm(tiny_corpus, spm_dir, noise_cuts="cuts_dev.jsonl.gz", speed_perturb=True)
    batches = list(dm.train_dataloader())
    assert batches and all(torch.isfinite(b.feats).all() for b in batches)


def test_lightning_fit_uses_the_loaders(tiny_corpus, spm_dir):
    import lightning as L

    class Probe(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(80, 2)
            self.train_keys, self.val_keys = [], []

        def training_step(self, batch, _):
            self.train_keys += batch.keys
            return self.lin(batch.feats).mean()

        def validation_step(self, batch, _):
            self.val_keys += batch.keys

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    dm = _dm(tiny_corpus, spm_dir)
    probe = Probe()
    trainer = L.Trainer(max_epochs=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    trainer.fit(probe, datamodule=dm)
    n_train = len(read_cuts(tiny_corpus / "cuts_train.jsonl.gz"))
    assert len(probe.train_keys) == 2 * n_train == 2 * len(set(probe.train_keys))
    # set_epoch reached the sampler: the two epochs are shuffled differently
    assert probe.train_keys[:n_train] != probe.train_keys[n_train:]
    assert len(probe.val_keys) == 2 * len(read_cuts(tiny_corpus / "cuts_dev.jsonl.gz"))


@pytest.mark.parametrize("lazy", [False, True])
def test_sentencepiece_untokenizable_text(bad_corpus, spm_dir, lazy):
    # sentencepiece turns "中文" into ["▁", <unk>]: a word boundary alone is no content
    root, good_ids = bad_corpus
    dm = _dm(root, spm_dir, lazy=lazy)
    dm.setup("fit")
    # an eager read checks every cut up front; a lazy one as the sampler streams them
    assert dm.skip_report().get("untokenizable_text", 0) == (0 if lazy else 1)
    list(dm.train_dataloader())
    assert dm.skip_report()["untokenizable_text"] == 1
    assert dm._has_content(dm.tokenizer.encode("hello")) and not dm._has_content(dm.tokenizer.encode("中文"))


@pytest.mark.parametrize("workers, drawn", [(0, False), (1, False), (1, True)])
def test_lead_ins_start_at_their_epoch_in_the_loaders_workers(tiny_corpus, spm_dir, workers, drawn):
    """lead_in_from_epoch=1: the first epoch reads every utterance as it is, the second puts silence
    before each; the epoch reaches the dataset through the sampler's set_epoch, worker processes included
    (and, batched by drawn length, the sampler's planned lengths: asr.data.cut_plan)."""
    import lightning as L

    class Probe(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(80, 2)
            self.lengths = [{}, {}]  # per epoch: key -> frames

        def training_step(self, batch, _):
            for key, n in zip(batch.keys, batch.feat_lens.tolist()):
                self.lengths[self.current_epoch][key] = n
            return self.lin(batch.feats).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    dm = _dm(tiny_corpus, spm_dir, num_workers=workers, lead_in_prob=1.0, lead_in_max_s=0.3, lead_in_from_epoch=1,
             batch_by_drawn_length=drawn)
    probe = Probe()
    trainer = L.Trainer(max_epochs=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                        limit_val_batches=0)
    trainer.fit(probe, datamodule=dm)
    first, second = probe.lengths
    assert first and first.keys() == second.keys()
    clean = {c.id: c for c in read_cuts(tiny_corpus / "cuts_train.jsonl.gz")}
    for key, frames in first.items():
        assert abs(frames - round(clean[key].duration * 100)) <= 2  # no lead-in: the utterance's own frames
        assert 1 <= second[key] - frames <= 30  # then 1 to 30 silent frames before it
    if drawn:  # the sampler planned the lead-ins the workers drew
        planner = dm.train_dataloader().dataset.planner
        for key, frames in second.items():
            assert frames - first[key] == planner.plan(key, 1).frames_added()


def test_lead_in_from_epoch_must_not_be_negative(tiny_corpus, spm_dir):
    with pytest.raises(ValueError, match="lead_in_from_epoch"):
        _dm(tiny_corpus, spm_dir, lead_in_from_epoch=-1)


def test_bucket_padded_training_batches_keep_every_frame(tiny_corpus, spm_dir):
    plain = list(_dm(tiny_corpus, spm_dir).train_dataloader())
    padded_dm = _dm(tiny_corpus, spm_dir, frame_buckets=[64, 128, 256], token_multiple=8)
    padded = list(padded_dm.train_dataloader())
    assert [b.keys for b in padded] == [b.keys for b in plain] and not padded_dm._pin_memory()  # no trainer: no pinning
    for p, b in zip(padded, plain):
        frames, tokens = b.feats.size(1), b.tokens.size(1)
        assert p.feats.size(1) in (64, 128, 256) or p.feats.size(1) % 256 == 0
        assert p.feats.size(1) >= frames and p.tokens.size(1) % 8 == 0
        assert torch.equal(p.feats[:, :frames], b.feats) and torch.all(p.feats[:, frames:] == 0)
        assert torch.equal(p.tokens[:, :tokens], b.tokens) and torch.all(p.tokens[:, tokens:] == -1)
        assert torch.equal(p.feat_lens, b.feat_lens) and torch.equal(p.token_lens, b.token_lens)


def test_spec_augment_starts_at_its_epoch_and_leaves_the_other_draws(tiny_corpus, spm_dir):
    """spec_augment_from_epoch=1: the first epoch's batches equal those read without SpecAugment (the masks are
    each row's last draws, so skipping them moves nothing else); the second epoch's are masked copies of the
    unmasked second epoch (same keys and lengths, some frames changed)."""
    def epochs(**kw):
        loader = _dm(tiny_corpus, spm_dir, seed=3, **kw).train_dataloader()
        out = []
        for epoch in (0, 1):
            loader.sampler.set_epoch(epoch)
            out.append(list(loader))
        return out

    plain, late = epochs(spec_augment=False), epochs(spec_augment=True, spec_augment_from_epoch=1)
    for a, b in zip(plain[0], late[0]):
        assert a.keys == b.keys and torch.equal(a.feats, b.feats)
    changed = 0
    for a, b in zip(plain[1], late[1]):
        assert a.keys == b.keys and torch.equal(a.feat_lens, b.feat_lens)
        changed += int(not torch.equal(a.feats, b.feats))
    assert changed and len(plain[1]) == len(late[1])
    with pytest.raises(ValueError, match="spec_augment_from_epoch"):
        _dm(tiny_corpus, spm_dir, spec_augment_from_epoch=-1)
