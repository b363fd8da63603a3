"""Backgrounds mixed on log-mel features (asr.data.background): the mix against a float64 reference at the
drawn SNR, against the fbank of the same mix made on the waveform, and what the dataset does with it."""

import math

import numpy as np
import pytest
import torch
from lhotse import CutSet

from asr.data.audio import cut_waveform
from asr.data.background import BackgroundMix, loop_to, mix_log_mel
from asr.data.dataset import AsrDataset
from asr.data.features import DB_PER_NEPER, FRAME_SHIFT_S, FbankExtractor, load_feature_config
from asr.data.manifest import read_cuts
from asr.synth.noise_bank import NOISE_BANK_KINDS, NOISE_BANK_MANIFEST, NOISE_BANK_RMS_DBFS, build_noise_bank


def mean_log_energy(log_mel: torch.Tensor) -> torch.Tensor:
    """(T, F) log-mel -> () the log of the mean over frames of a frame's summed mel energy, in float64."""
    x = log_mel.double()
    return torch.logsumexp(x.reshape(-1), dim=0) - math.log(x.shape[0])


def _reference_mix(speech: np.ndarray, background: np.ndarray, snr_db: float, speech_from: int,
                   floor: np.ndarray | None = None) -> np.ndarray:
    """The mix written out in float64 numpy: mel energies (the background's over its floor), their mean per
    frame over the speech, the gain."""
    s, b = np.exp(speech.astype(np.float64)), np.exp(background.astype(np.float64))
    if floor is not None:
        b = np.maximum(b - np.exp(floor.astype(np.float64)), 0.0)
    gain = s[speech_from:].sum(1).mean() / b[speech_from:].sum(1).mean() / 10.0 ** (snr_db / 10.0)
    return np.log(s + gain * b)


def test_the_mix_is_the_float64_reference_and_holds_the_drawn_snr():
    g = torch.Generator().manual_seed(0)
    speech = torch.randn(60, 80, generator=g) * 2 + 5  # (T, F) log-mel
    background = torch.randn(60, 80, generator=g) * 2 - 1
    for snr_db, speech_from in ((20.0, 0), (7.5, 12), (-3.0, 59)):
        mixed = mix_log_mel(speech, background, snr_db, speech_from)
        assert mixed.dtype == speech.dtype and mixed.shape == speech.shape
        reference = _reference_mix(speech.numpy(), background.numpy(), snr_db, speech_from)
        np.testing.assert_allclose(mixed.numpy(), reference, rtol=0, atol=1e-5)
        # the background's share, taken back out of the mix, sits snr_db under the speech
        added = torch.log(torch.exp(mixed.double()) - torch.exp(speech.double()))
        measured = DB_PER_NEPER * float(mean_log_energy(speech[speech_from:]) - mean_log_energy(added[speech_from:]))
        assert measured == pytest.approx(snr_db, abs=1e-3)
    floor = torch.full((80,), -2.0)
    mixed = mix_log_mel(speech, background, 10.0, 5, floor=floor)
    reference = _reference_mix(speech.numpy(), background.numpy(), 10.0, 5, floor.numpy())
    np.testing.assert_allclose(mixed.numpy(), reference, rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="differ in shape"):
        mix_log_mel(speech, background[:10], 10.0)
    with pytest.raises(ValueError, match="speech_from"):
        mix_log_mel(speech, background, 10.0, speech_from=60)


def test_a_silent_stretch_of_the_background_stays_silent_however_far_it_is_scaled_up():
    floor = torch.full((4,), -15.0)  # (F,) the frontend's clamp
    speech = torch.full((6, 4), 3.0)
    background = torch.cat([torch.full((3, 4), -8.0), floor.expand(3, 4)])  # quiet, then digital silence
    mixed = mix_log_mel(speech, background, snr_db=0.0, floor=floor)  # a gain of about e^11
    assert torch.allclose(mixed[3:], speech[3:])  # the silence added nothing
    assert bool((mixed[:3] > speech[:3] + 0.5).all())
    assert torch.equal(mix_log_mel(speech, floor.expand(6, 4), 0.0, floor=floor), speech)  # all silence: as it was


def test_loop_to_starts_at_the_drawn_frame_and_repeats():
    background = torch.arange(5.0).unsqueeze(1).expand(5, 2)  # (5, 2), frame i holds i
    assert loop_to(background, 12, start=3)[:, 0].tolist() == [3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4]
    assert loop_to(background, 2, start=7)[:, 0].tolist() == [2, 3]
    with pytest.raises(ValueError, match="empty"):
        loop_to(background[:0], 3, 0)


@pytest.mark.parametrize("kind", NOISE_BANK_KINDS)
def test_the_mix_on_features_reads_like_the_fbank_of_the_waveform_mix(tiny_corpus, tmp_path, kind):
    """Mel energies of independent sources add: the feature mix stays within about a dB of the fbank of the
    same mix made on the waveform, with the gain the feature mix chose."""
    bank = read_cuts(build_noise_bank(tmp_path, seed=1, clips_per_kind=1, seconds=4.0))
    noise_wav = cut_waveform(next(c for c in bank if c.custom["noise"] == kind))
    extractor = FbankExtractor(load_feature_config("sherpa"))
    for cut in read_cuts(tiny_corpus / "cuts_train.jsonl.gz").subset(first=3):
        speech_wav = cut_waveform(cut)
        noise = noise_wav.repeat(-(-speech_wav.numel() // noise_wav.numel()))[: speech_wav.numel()]
        speech, background = extractor(speech_wav), extractor(noise)  # (T, F) each
        floor = extractor(torch.zeros(16000))[0]  # (F,) digital silence
        for snr_db in (20.0, 5.0):
            log_gain = float(mean_log_energy(speech) - mean_log_energy(background)) - snr_db / DB_PER_NEPER
            on_waveform = extractor(speech_wav + math.exp(log_gain / 2) * noise)
            difference = (mix_log_mel(speech, background, snr_db, floor=floor) - on_waveform) * DB_PER_NEPER
            assert float(difference.abs().mean()) < 1.5, (kind, snr_db)
            assert abs(float(difference.mean())) < 0.6, (kind, snr_db)
            # the waveform mixed 6 dB louder reads further from the feature mix
            louder = extractor(speech_wav + math.exp(log_gain / 2) * 2 * noise)
            off = (mix_log_mel(speech, background, snr_db, floor=floor) - louder) * DB_PER_NEPER
            assert float(off.abs().mean()) > float(difference.abs().mean()) + 0.3, (kind, snr_db)


class _WordTokenizer:
    def encode(self, text):
        return [len(word) for word in text.split()]


def _dataset(tmp_path, **mix) -> tuple[AsrDataset, CutSet]:
    bank = read_cuts(build_noise_bank(tmp_path, seed=1, clips_per_kind=1, seconds=2.0))
    fields = dict(prob=1.0, snr_db=(5.0, 15.0), lead_in_max_s=0.3, from_epoch=1) | mix
    return AsrDataset(_WordTokenizer(), FbankExtractor(), background=BackgroundMix(**fields),
                      background_noise_cuts=bank, seed=5), bank


def test_the_dataset_mixes_from_its_epoch_on_keeps_the_words_and_draws_per_cut(tiny_corpus, tmp_path):
    cuts = read_cuts(tiny_corpus / "cuts_train.jsonl.gz").subset(first=4)
    dataset, _ = _dataset(tmp_path)
    plain = AsrDataset(_WordTokenizer(), FbankExtractor(), seed=5)[cuts][0]
    dataset.set_epoch(0)  # before from_epoch: the batch of a dataset without backgrounds
    assert torch.equal(dataset[cuts][0].feats, plain.feats)
    dataset.set_epoch(1)
    batch, skipped, _ = dataset[cuts]
    assert skipped == [] and batch.keys == plain.keys
    assert [t.tolist() for t in batch.tokens] == [t.tolist() for t in plain.tokens]  # transcripts untouched
    leads = (batch.feat_lens - plain.feat_lens).tolist()
    assert all(0 <= k <= round(0.3 / FRAME_SHIFT_S) for k in leads)
    for i, k in enumerate(leads):
        n = int(plain.feat_lens[i])
        assert not torch.allclose(batch.feats[i, k:k + n], plain.feats[i, :n])  # a background is under it
        assert bool((batch.feats[i, k:k + n] >= plain.feats[i, :n] - 1e-5).all())  # added, never taken away
    assert torch.equal(dataset[cuts][0].feats, batch.feats)  # the same draws again
    dataset.set_epoch(2)
    assert not torch.equal(dataset[cuts][0].feats[:, :20], batch.feats[:, :20])  # new draws each epoch


def test_a_background_that_stops_at_the_speech_fills_only_the_lead_in(tiny_corpus, tmp_path):
    cuts = read_cuts(tiny_corpus / "cuts_train.jsonl.gz").subset(first=4)
    dataset, _ = _dataset(tmp_path, under_speech=False, lead_in_max_s=0.5, from_epoch=0)
    plain = AsrDataset(_WordTokenizer(), FbankExtractor(), seed=5)[cuts][0]
    batch = dataset[cuts][0]
    leads = (batch.feat_lens - plain.feat_lens).tolist()
    assert any(k > 0 for k in leads)
    silence = dataset.silence_frame()
    for i, k in enumerate(leads):
        n = int(plain.feat_lens[i])
        assert torch.equal(batch.feats[i, k:k + n], plain.feats[i, :n])  # the speech as it was
        if k:
            assert bool((batch.feats[i, :k] > silence + 1.0).any())  # the lead-in hears the background


def test_without_another_talker_or_noise_an_utterance_stays_clean(tiny_corpus, tmp_path):
    one = read_cuts(tiny_corpus / "cuts_train.jsonl.gz").subset(first=1)
    dataset = AsrDataset(_WordTokenizer(), FbankExtractor(), background=BackgroundMix(prob=1.0), seed=5)
    plain = AsrDataset(_WordTokenizer(), FbankExtractor(), seed=5)
    assert torch.equal(dataset[one][0].feats, plain[one][0].feats)  # a batch of one: no talker to mix
    talkers_only = read_cuts(tiny_corpus / "cuts_train.jsonl.gz").subset(first=3)
    assert not torch.equal(dataset[talkers_only][0].feats, plain[talkers_only][0].feats)


def test_an_unreadable_noise_clip_is_a_noise_skip_and_the_speech_is_kept(tiny_corpus, tmp_path):
    one = read_cuts(tiny_corpus / "cuts_train.jsonl.gz").subset(first=1)
    dataset, bank = _dataset(tmp_path, talker_share=0.0, from_epoch=0)
    for cut in bank:
        (tmp_path / cut.recording.sources[0].source).write_bytes(b"fLaC gone bad")
    batch, skipped, _ = dataset[one]
    assert batch.keys == [one[0].id] and {reason for reason, _ in skipped} == {"noise_audio_corrupt"}
    plain = AsrDataset(_WordTokenizer(), FbankExtractor(), seed=5)[one][0]
    assert torch.equal(batch.feats, plain.feats)


def test_background_settings_are_checked():
    assert BackgroundMix.from_dict(None) == BackgroundMix() and not BackgroundMix().enabled
    assert BackgroundMix.from_dict({"prob": 0.3, "snr_db": [0, 20]}).snr_db == (0.0, 20.0)
    with pytest.raises(ValueError, match="unknown keys"):
        BackgroundMix.from_dict({"probability": 0.3})
    for bad in ({"prob": 1.5}, {"talker_share": -0.1}, {"snr_db": (20.0, 5.0)}, {"lead_in_max_s": -1.0},
                {"from_epoch": -1}):
        with pytest.raises(ValueError):
            BackgroundMix(**bad)


def test_the_noise_bank_is_seeded_and_holds_every_kind_at_its_level(tmp_path):
    first = read_cuts(build_noise_bank(tmp_path / "a", seed=2, clips_per_kind=2, seconds=1.0))
    again = read_cuts(build_noise_bank(tmp_path / "b", seed=2, clips_per_kind=2, seconds=1.0))
    other = read_cuts(build_noise_bank(tmp_path / "c", seed=3, clips_per_kind=2, seconds=1.0))
    assert (tmp_path / "a" / NOISE_BANK_MANIFEST).is_file()
    assert sorted(c.custom["noise"] for c in first) == sorted(NOISE_BANK_KINDS * 2)
    for a, b, c in zip(first, again, other):
        wav = cut_waveform(a)
        assert torch.equal(wav, cut_waveform(b)) and not torch.equal(wav, cut_waveform(c))
        rms_dbfs = 20 * math.log10(float(wav.pow(2).mean().sqrt()))
        assert rms_dbfs == pytest.approx(NOISE_BANK_RMS_DBFS, abs=0.5)
    with pytest.raises(ValueError):
        build_noise_bank(tmp_path / "d", seed=0, clips_per_kind=0)


def test_the_datamodule_names_a_missing_noise_manifest(tiny_corpus, spm_dir):
    from asr.data.datamodule import AsrDataModule

    with pytest.raises(FileNotFoundError, match="noise_cuts"):
        AsrDataModule(str(tiny_corpus), str(spm_dir), num_workers=0,
                      background={"prob": 0.2, "noise_cuts": "cuts_no_such_bank.jsonl.gz"})
    off = AsrDataModule(str(tiny_corpus), str(spm_dir), num_workers=0,
                        background={"prob": 0.0, "noise_cuts": "cuts_no_such_bank.jsonl.gz"})
    assert not off.background.enabled
