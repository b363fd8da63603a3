"""The feature queue puts the frames of its last one or two drops back in front, raw and normalized alike."""

import pytest
import torch

from asr.model.normalization import OnlineCmn
from asr.serve.frames import FeatureQueue
from asr.streaming.frontend import StreamingFrontend

F = 4


def _queue() -> tuple[FeatureQueue, torch.Tensor]:
    frames = torch.arange(10 * F, dtype=torch.float32).reshape(10, F)
    queue = FeatureQueue(StreamingFrontend(), keep_raw=False)
    queue.add(frames)
    return queue, frames


def test_the_last_drop_or_two_go_back_in_stream_order():
    queue, frames = _queue()
    queue.drop(3)
    queue.drop(3)
    queue.rewind(1, drops=2)  # from the first drop's frame 1 on
    assert torch.equal(queue.feats, frames[1:])
    queue.drop(2)
    queue.rewind(0)
    assert torch.equal(queue.feats, frames[1:])


def test_only_two_drops_are_remembered_and_a_rewind_forgets_them():
    queue, frames = _queue()
    for _ in range(3):
        queue.drop(2)
    queue.rewind(0, drops=2)  # the second and third drops
    assert torch.equal(queue.feats, frames[2:])
    with pytest.raises(ValueError, match="cannot rewind 1"):
        queue.rewind(0)
    queue.drop(2)
    with pytest.raises(ValueError, match="cannot rewind 2"):
        queue.rewind(0, drops=2)
    with pytest.raises(ValueError, match="outside"):
        queue.rewind(3)


def test_a_normalizing_queue_puts_the_raw_frames_back_too():
    cmn = OnlineCmn(torch.zeros(F), prior_frames=2.0)
    queue = FeatureQueue(StreamingFrontend(online_cmn=cmn), keep_raw=True)
    frames = torch.randn(10, F, generator=torch.Generator().manual_seed(0))
    queue.add(frames)
    normalized = queue.feats.clone()
    queue.drop(3)
    queue.drop(3)
    queue.rewind(2, drops=2)
    assert torch.equal(queue.feats, normalized[2:])
    queue.renormalize()  # from the raw frames: a fresh running mean over frames 2..9
    fresh = FeatureQueue(StreamingFrontend(online_cmn=cmn), keep_raw=True)
    fresh.add(frames[2:])
    assert torch.allclose(queue.feats, fresh.feats)
