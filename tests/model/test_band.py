"""band_sums / band_expand equal their index-based definitions (gather / scatter_add)."""

import pytest
import torch

from asr.model.scorers.band import BandExpand, band_expand, band_sums, clipped_distance_index

SHAPES = [(5, 5, 2), (3, 9, 2), (1, 7, 3), (6, 6, 0), (4, 4, 9), (2, 12, 1), (8, 8, 7), (70, 70, 16), (40, 90, 16)]  # (C, K, k)


@pytest.mark.parametrize("c,kk,k", SHAPES)
def test_band_sums_equals_scatter_add_over_the_bucket_index(c, kk, k):
    gen = torch.Generator().manual_seed(c * 100 + kk * 10 + k)
    x = torch.randn(2, 3, c, kk, generator=gen, dtype=torch.float64)
    index = clipped_distance_index(c, kk, k, x.device)
    expected = x.new_zeros(2, 3, c, 2 * k + 1).scatter_add_(-1, index.expand(2, 3, c, kk), x)
    torch.testing.assert_close(band_sums(x, k), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("c,kk,k", SHAPES)
def test_band_expand_equals_gather_and_its_gradient_is_band_sums(c, kk, k):
    gen = torch.Generator().manual_seed(7 + c + kk + k)
    table = torch.randn(2, c, 2 * k + 1, generator=gen, dtype=torch.float64, requires_grad=True)
    index = clipped_distance_index(c, kk, k, table.device)
    expected = table.gather(-1, index.expand(2, c, kk))
    out = band_expand(table, kk)
    assert out.is_contiguous() and out.shape == (2, c, kk)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    if c * kk <= 100:  # gradcheck is one forward per input element
        assert torch.autograd.gradcheck(lambda t: BandExpand.apply(t, kk), (table,))
    else:
        grad = torch.randn(2, c, kk, generator=gen, dtype=torch.float64)
        (BandExpand.apply(table, kk) * grad).sum().backward()
        expected_grad = torch.zeros_like(table).scatter_add_(-1, index.expand(2, c, kk), grad)
        torch.testing.assert_close(table.grad, expected_grad, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("block", [1, 2, 3, 64])
@pytest.mark.parametrize("c,kk", [(5, 5), (3, 9), (7, 4), (1, 6)])
def test_row_block_triangle_sums_equal_masked_sums(block, c, kk):
    from asr.model.scorers.band import _lower_sums, _upper_sums

    x = torch.randn(2, c, kk, generator=torch.Generator().manual_seed(block + c + kk), dtype=torch.float64)
    a = torch.arange(c)[:, None]
    b = torch.arange(kk)[None, :]
    for offset in range(-kk - 2, kk + 3):
        torch.testing.assert_close(_lower_sums(x, offset, block), (x * (b <= a + offset)).sum(-1))
        torch.testing.assert_close(_upper_sums(x, offset, block), (x * (b >= a + offset)).sum(-1))


@pytest.mark.parametrize("c,kk,k", [(4, 6, 2), (8, 8, 3), (5, 12, 0), (3, 3, 5), (16, 16, 16)])
def test_band_maps_at_any_offset_equal_the_index_definitions(c, kk, k):
    """Block pairs of the blocked attention: the queries' first time minus the keys' first time (M)
    may be anything, from far behind the key block to far after it."""
    gen = torch.Generator().manual_seed(c + kk + k)
    x = torch.randn(2, c, kk, generator=gen, dtype=torch.float64)
    table = torch.randn(2, c, 2 * k + 1, generator=gen, dtype=torch.float64)
    for offset in range(-c - kk - k - 2, kk + c + k + 3):
        index = clipped_distance_index(c, kk, k, x.device, offset)
        a, b = torch.arange(c)[:, None], torch.arange(kk)[None, :]
        assert torch.equal(index, (b - a - offset).clamp(-k, k) + k)
        expected = x.new_zeros(2, c, 2 * k + 1).scatter_add_(-1, index.expand(2, c, kk), x)
        torch.testing.assert_close(band_sums(x, k, offset), expected, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(band_expand(table, kk, offset), table.gather(-1, index.expand(2, c, kk)))
