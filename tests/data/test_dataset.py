"""AsrDataset: what a bad noise file costs (a noise skip, never the speech cut)."""

import torch
from lhotse import CutSet

from asr.data.audio import cut_waveform
from asr.data.dataset import AsrDataset
from asr.data.features import FbankExtractor
from asr.data.importers import make_cut, make_recording
from tones import write_tone


def _speech_and_noise(folder):
    write_tone(folder / "speech.wav", 1.0, freq=300)
    write_tone(folder / "noise.wav", 0.5, freq=2500)
    speech = make_cut("speech", make_recording("speech", folder / "speech.wav"), "hello")
    noise = make_cut("noise", make_recording("noise", folder / "noise.wav"), "")
    return speech, noise


class _FixedTokenizer:
    def encode(self, text):
        return [3, 4] if text == "hello" else []


def _dataset(noise) -> AsrDataset:
    return AsrDataset(_FixedTokenizer(), FbankExtractor(), noise_cuts=CutSet.from_cuts([noise]), noise_prob=1.0)


def test_a_bad_noise_file_is_a_noise_skip_and_the_speech_cut_is_kept(tmp_path):
    speech, noise = _speech_and_noise(tmp_path)
    (tmp_path / "noise.wav").write_bytes(b"RIFF no longer audio")  # went bad after import
    batch, skipped, seconds = _dataset(noise)[CutSet.from_cuts([speech])]
    assert batch.keys == ["speech"] and batch.tokens[0].tolist() == [3, 4]
    assert seconds == speech.duration  # the speech cut counts as read
    assert skipped == [("noise_audio_corrupt", "noise")]
    # the speech went through clean
    clean = FbankExtractor()(cut_waveform(speech))  # (T, F)
    assert torch.equal(batch.feats[0, : clean.shape[0]], clean)


def test_a_good_noise_file_is_mixed_in_and_nothing_is_skipped(tmp_path):
    speech, noise = _speech_and_noise(tmp_path)
    batch, skipped, _ = _dataset(noise)[CutSet.from_cuts([speech])]
    assert batch.keys == ["speech"] and skipped == []
    clean = FbankExtractor()(cut_waveform(speech))  # (T, F)
    assert not torch.allclose(batch.feats[0, : clean.shape[0]], clean, atol=1e-3)


def test_a_lead_in_puts_the_frontends_frames_of_exact_zeros_before_the_speech(tmp_path):
    from asr.data.features import FRAME_SHIFT_S

    speech, _ = _speech_and_noise(tmp_path)
    extractor = FbankExtractor()
    clean = extractor(cut_waveform(speech))  # (T, F)
    dataset = AsrDataset(_FixedTokenizer(), extractor, lead_in_prob=1.0, lead_in_max_s=0.5)
    lengths = set()
    for epoch in range(20):  # a cut's draws change with the epoch
        dataset.set_epoch(epoch)
        batch, skipped, _ = dataset[CutSet.from_cuts([speech])]
        frames = int(batch.feat_lens[0])
        k = frames - clean.shape[0]
        assert 1 <= k <= round(0.5 / FRAME_SHIFT_S) and skipped == [] and batch.tokens[0].tolist() == [3, 4]
        assert torch.equal(batch.feats[0, k:frames], clean)  # the speech untouched, after the lead-in
        # the lead-in is what the frontend makes of zeros: the frames of a zero-padded recording
        zeros = extractor(torch.zeros(16000))  # (T0, F)
        assert torch.allclose(batch.feats[0, :k], zeros[:k].to(batch.feats.dtype), atol=1e-5)
        lengths.add(k)
    assert len(lengths) > 5  # drawn, not fixed
    off = AsrDataset(_FixedTokenizer(), extractor)
    assert int(off[CutSet.from_cuts([speech])][0].feat_lens[0]) == clean.shape[0]


def test_lead_in_lengths_cover_every_frame_count_from_one_to_the_maximum(tmp_path):
    import random

    dataset = AsrDataset(_FixedTokenizer(), FbankExtractor(), lead_in_prob=1.0, lead_in_max_s=0.03)  # 3 frames
    f = torch.zeros(5, 80)  # (T, F)
    drawn = {dataset.with_lead_in(f, dataset.planner.draw(random.Random(i), epoch=0)).size(0) - f.size(0)
             for i in range(200)}
    assert drawn == {1, 2, 3}  # one frame is a lead-in too
    one = AsrDataset(_FixedTokenizer(), FbankExtractor(), lead_in_prob=1.0, lead_in_max_s=0.01)
    assert one.with_lead_in(f, one.planner.draw(random.Random(0), epoch=0)).size(0) == f.size(0) + 1
