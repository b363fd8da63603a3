"""Masks: chunk visibility against a per-element rule, padding, argument checks."""

import pytest
import torch

from asr.model.masks import attention_mask, chunk_mask, padding_mask


def _visible(i: int, j: int, chunk_size: int, left_chunks: int, phase: int = 0) -> bool:
    if chunk_size == 0:
        return True
    ci, cj = (i + phase) // chunk_size, (j + phase) // chunk_size
    return cj <= ci and (left_chunks < 0 or cj >= ci - left_chunks)


@pytest.mark.parametrize("size", [1, 7, 13])
@pytest.mark.parametrize("chunk_size", [0, 1, 3, 4, 20])
@pytest.mark.parametrize("left_chunks", [-1, 0, 1, 2])
def test_chunk_mask_matches_rule(size, chunk_size, left_chunks):
    mask = chunk_mask(size, chunk_size, left_chunks)
    assert mask.shape == (size, size) and mask.dtype == torch.bool
    expected = torch.tensor(
        [[_visible(i, j, chunk_size, left_chunks) for j in range(size)] for i in range(size)], dtype=torch.bool
    ).view(size, size)
    assert torch.equal(mask, expected)


@pytest.mark.parametrize("chunk_size,left_chunks", [(3, -1), (4, 1), (5, 0)])
def test_a_shifted_grid_matches_the_rule_for_every_phase(chunk_size, left_chunks):
    for phase in range(chunk_size):
        expected = torch.tensor([[_visible(i, j, chunk_size, left_chunks, phase) for j in range(13)]
                                 for i in range(13)], dtype=torch.bool)
        assert torch.equal(chunk_mask(13, chunk_size, left_chunks, phase=phase), expected)


def test_a_shifted_grid_starts_with_a_short_chunk():
    # chunk 4, phase 3: chunks are [0], [1..4], [5..8]: frame 0 sees only itself, frame 1 sees 0 and 1..4 no
    mask = chunk_mask(9, 4, -1, phase=3)
    assert mask[0].tolist() == [True] + [False] * 8
    assert mask[1].tolist() == [True] * 5 + [False] * 4
    assert mask[5].tolist() == [True] * 9


@pytest.mark.parametrize("chunk_size,phase", [(4, 4), (4, -1), (0, 1)])
def test_a_phase_outside_the_chunk_raises(chunk_size, phase):
    with pytest.raises(ValueError, match="phase"):
        chunk_mask(5, chunk_size, -1, phase=phase)


def test_chunk_mask_example():
    # chunk 2, one left chunk: frame 5 (chunk 2) sees frames 2..5, never 6.
    mask = chunk_mask(7, 2, 1)
    assert mask[5].tolist() == [False, False, True, True, True, True, False]
    assert mask[0].tolist() == [True, True, False, False, False, False, False]


def test_padding_mask():
    mask = padding_mask(torch.tensor([3, 0, 5]), 5)
    assert mask.tolist() == [
        [True, True, True, False, False],
        [False] * 5,
        [True] * 5,
    ]
    assert padding_mask(torch.tensor([2, 4])).shape == (2, 4)


def test_attention_mask_combines_chunks_and_padding():
    lengths = torch.tensor([6, 3])
    mask = attention_mask(lengths, 6, chunk_size=2, left_chunks=0)
    assert mask.shape == (2, 6, 6)
    chunks = chunk_mask(6, 2, 0)
    assert torch.equal(mask[0], chunks)
    assert torch.equal(mask[1], chunks & (torch.arange(6) < 3)[None, :])
    full = attention_mask(lengths, 6)
    assert full.shape == (2, 1, 6)  # broadcasts over queries
    assert torch.equal(full[1, 0], torch.arange(6) < 3)


@pytest.mark.parametrize("chunk_size,left_chunks", [(-1, -1), (4, -2)])
def test_bad_chunk_args_raise(chunk_size, left_chunks):
    with pytest.raises(ValueError, match=str(min(chunk_size, left_chunks))):
        chunk_mask(5, chunk_size, left_chunks)


@pytest.mark.parametrize("chunk, left, phase", [(0, -1, 0), (1, 0, 0), (3, 1, 0), (4, -1, 0), (5, 2, 0),
                                                (3, 1, 2), (4, -1, 1), (5, 2, 3), (5, 0, 4)])
def test_chunk_mask_blocks_and_key_spans_agree_with_the_dense_mask(chunk, left, phase):
    from asr.model.masks import ChunkMask

    lengths = torch.tensor([23, 17, 0])
    mask = ChunkMask(lengths, 23, chunk, left, phase)
    dense = mask.dense()
    assert torch.equal(dense, attention_mask(lengths, 23, chunk, left, phase))
    full = dense.expand(3, 23, 23)
    for q0, q1 in [(0, 1), (0, 5), (4, 11), (10, 23), (22, 23)]:
        lo, hi = mask.key_span(q0, q1)
        visible = full[:, q0:q1].any(0).any(0).nonzero().flatten()
        if visible.numel():
            assert lo <= int(visible.min()) and int(visible.max()) < hi  # no visible key outside the span
        for k0, k1 in [(0, 23), (2, 9), (lo, hi), (15, 23)]:
            if k1 <= k0:
                continue
            block = mask.block(q0, q1, k0, k1)
            want = full[:, q0:q1, k0:k1]
            if block is None:
                assert bool(want.all())
            else:
                assert torch.equal(block.expand_as(want), want)
