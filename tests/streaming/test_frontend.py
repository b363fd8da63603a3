"""StreamingFrontend: frames of audio fed in any pieces == the whole utterance's frames, bit for bit."""

import pytest
import torch

from asr.data.features import LEGACY, SHERPA, FbankExtractor
from asr.model.normalization import OnlineCmn
from asr.streaming.frontend import StreamingFrontend


def pieces(wave: torch.Tensor, seed: int, largest: int = 3000):
    """Audio cut into random pieces of 0..largest samples."""
    g = torch.Generator().manual_seed(seed)
    start = 0
    while start < wave.numel():
        n = int(torch.randint(0, largest, (1,), generator=g))
        yield wave[start : start + n]
        start += n


def stream_all(frontend: StreamingFrontend, wave: torch.Tensor, seed: int) -> torch.Tensor:
    parts = [frontend.accept(p) for p in pieces(wave, seed)] + [frontend.finish()]
    return torch.cat([p for p in parts if p is not None])


@pytest.mark.parametrize("config", [LEGACY, SHERPA], ids=["legacy", "sherpa"])
@pytest.mark.parametrize("seed", range(3))
def test_online_frames_equal_offline_frames_exactly(config, seed):
    wave = 0.1 * torch.randn(16000 + 123 * seed, generator=torch.Generator().manual_seed(seed))
    wave[:2000] = 0.0  # digital silence too
    online = stream_all(StreamingFrontend(config), wave, seed)
    assert torch.equal(online, FbankExtractor(config)(wave))


def test_centred_frames_wait_for_the_end():
    """snip_edges=False: the frames whose window reaches past the audio come only from finish()."""
    wave = 0.1 * torch.randn(8000, generator=torch.Generator().manual_seed(0))
    frontend = StreamingFrontend(SHERPA)
    early = frontend.accept(wave)
    late = frontend.finish()
    assert early.size(0) + late.size(0) == FbankExtractor(SHERPA).num_frames(8000) == 50
    assert late.size(0) == 1  # frame 49 spans samples [7720, 8120): past the 8000 received


def test_short_audio_gives_no_frames_as_offline():
    frontend = StreamingFrontend(SHERPA)
    assert frontend.accept(torch.zeros(399)) is None and frontend.finish() is None
    assert FbankExtractor(SHERPA)(torch.zeros(399)).shape == (0, 80)


def test_online_cmn_is_applied_frame_by_frame_as_on_the_whole_utterance():
    wave = 0.1 * torch.randn(12000, generator=torch.Generator().manual_seed(1))
    norm = OnlineCmn(torch.full((80,), 3.0), 20.0)
    online = stream_all(StreamingFrontend(SHERPA, norm), wave, 1)
    assert torch.allclose(online, norm(FbankExtractor(SHERPA)(wave)), atol=1e-5)


def test_reset_starts_a_new_stream():
    wave = 0.1 * torch.randn(6000, generator=torch.Generator().manual_seed(2))
    frontend = StreamingFrontend(SHERPA, OnlineCmn(torch.zeros(80), 5.0))
    first = stream_all(frontend, wave, 0)
    frontend.reset()
    assert torch.equal(stream_all(frontend, wave, 1), first)
