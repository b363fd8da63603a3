"""Bucket padding (asr/data/buckets.py): a few shapes, every frame and token kept."""

import pytest
import torch

from asr.data.batch import Batch
from asr.data.buckets import bucket_length, check_buckets, geometric_buckets, pad_to_buckets


def _batch(frames: int, tokens: int) -> Batch:
    g = torch.Generator().manual_seed(frames)
    feat_lens = torch.tensor([frames, frames - 3])
    token_lens = torch.tensor([tokens, 1])
    feats = torch.randn(2, frames, 4, generator=g)
    feats[1, frames - 3:] = 0
    toks = torch.randint(1, 9, (2, tokens), generator=g)
    toks = toks.masked_fill(torch.arange(tokens)[None] >= token_lens[:, None], -1)
    return Batch(feats, feat_lens, toks, token_lens, ["a", "b"], ["x", "y"])


@pytest.mark.parametrize("frames,tokens", [(5, 3), (16, 8), (17, 9), (70, 1)])
def test_padding_keeps_every_frame_and_token(frames, tokens):
    batch = _batch(frames, tokens)
    padded = pad_to_buckets(batch, [16, 32, 8], token_multiple=4)
    assert padded.feats.size(1) == bucket_length(frames, (8, 16, 32)) and padded.feats.size(1) >= frames
    assert padded.tokens.size(1) % 4 == 0 and padded.tokens.size(1) >= tokens
    assert torch.equal(padded.feats[:, :frames], batch.feats)  # no frame moved or dropped
    assert padded.feats[:, frames:].abs().sum() == 0  # the new frames are padding
    assert torch.equal(padded.tokens[:, :tokens], batch.tokens) and (padded.tokens[:, tokens:] == -1).all()
    assert torch.equal(padded.feat_lens, batch.feat_lens) and torch.equal(padded.token_lens, batch.token_lens)
    assert padded.keys == batch.keys and padded.texts == batch.texts


def test_a_batch_longer_than_every_bucket_is_padded_not_cut():
    assert bucket_length(70, (8, 16, 32)) == 96 and bucket_length(32, (8, 16, 32)) == 32


def test_geometric_buckets_cover_the_range_in_multiples_of_8():
    buckets = geometric_buckets(200, 1600, 4)
    assert buckets == tuple(sorted(buckets)) and len(buckets) == 4 and buckets[-1] == 1600
    assert all(b % 8 == 0 for b in buckets) and buckets[0] == 200
    assert geometric_buckets(10, 10, 1) == (16,)


def test_bad_buckets_get_a_clear_error():
    with pytest.raises(ValueError, match="distinct lengths"):
        check_buckets([8, 8])
    with pytest.raises(ValueError, match="distinct lengths"):
        check_buckets([])
    with pytest.raises(ValueError, match="token_multiple"):
        check_buckets([8], token_multiple=0)
    with pytest.raises(ValueError, match="min_frames"):
        geometric_buckets(20, 10, 3)
