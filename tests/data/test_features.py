import pytest
import torch

from asr.data.features import FbankExtractor


@pytest.mark.parametrize("n", [0, 399, 400, 559, 560, 16000, 16123])
def test_num_frames_matches_output(n):
    fb = FbankExtractor()
    feats = fb(torch.randn(n) * 0.1)
    assert feats.shape == (fb.num_frames(n), 80) and feats.dtype == torch.float32


def test_min_samples_is_the_first_frame():
    fb = FbankExtractor()
    assert fb.num_frames(fb.min_samples) == 1 and fb.num_frames(fb.min_samples - 1) == 0


def test_prefix_frames_are_stable():
    # streaming recomputes fbank on a growing buffer: frames of a prefix must not change
    fb = FbankExtractor()
    wav = torch.randn(8000) * 0.1
    full, prefix = fb(wav), fb(wav[:5000])
    assert torch.allclose(full[: prefix.shape[0]], prefix, atol=1e-5)


def test_bad_arguments():
    with pytest.raises(ValueError, match="frame_shift_ms"):
        FbankExtractor(frame_shift_ms=30, frame_length_ms=25)
    with pytest.raises(ValueError, match=r"\(2, 100\)"):
        FbankExtractor()(torch.zeros(2, 100))
