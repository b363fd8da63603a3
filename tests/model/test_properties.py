"""Property tests (hypothesis): the fast attention paths and the chunk mask on random shapes.

The parametrized oracle tests pin a handful of shapes; these draw C, K and the
query block at random, C beyond 64 included (where rel_xl splits its queries into
several blocks and pads the last one), and compare against definitions written
index by index.
"""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from asr.model.masks import chunk_mask
from asr.model.positions import build_position_scheme
from asr.model.scorers import rel_shift, rel_shift_gather

H, DH = 2, 4


def call_shapes(max_c: int = 90, max_memory: int = 40):
    """(C, K) with K = C + M: C queries after M cached frames (M = 0 is offline)."""
    return st.tuples(st.integers(1, max_c), st.integers(0, max_memory)).map(lambda cm: (cm[0], cm[0] + cm[1]))


@settings(max_examples=40, deadline=None)
@given(shape=call_shapes(), seed=st.integers(0, 2**16))
def test_rel_shift_is_a_view_equal_to_the_gather(shape, seed):
    c, k = shape
    g = torch.Generator().manual_seed(seed)
    bd_full = torch.randn(1, H, c, k + c - 1, generator=g, dtype=torch.float64)
    shifted = rel_shift(bd_full, k)
    torch.testing.assert_close(shifted, rel_shift_gather(bd_full, k), rtol=0, atol=0)
    assert shifted.untyped_storage().data_ptr() == bd_full.untyped_storage().data_ptr()


@settings(max_examples=25, deadline=None)
@given(shape=call_shapes(), query_block=st.sampled_from([1, 7, 64]), seed=st.integers(0, 2**16))
def test_blocked_rel_xl_logits_equal_a_gather_of_every_pair(shape, query_block, seed):
    """Blocked BD + rel_shift against W_R R_{i-j} gathered for each (query, key) pair."""
    c, k = shape
    torch.manual_seed(seed)
    s = build_position_scheme("rel_xl", H * DH, H).make_scorer(H, DH, 0.0).double().eval()
    with torch.no_grad():
        for p in s.parameters():
            p.normal_()
    s.query_block = query_block
    q = torch.randn(1, H, c, DH, dtype=torch.float64)
    keys = torch.randn(1, H, k, DH, dtype=torch.float64)
    # Relative distance of query a (local time K - C + a) to key b: one row of sinusoids per distance.
    distances = torch.arange(k - c, k)[:, None] - torch.arange(k)[None, :]  # (C, K)
    table = s.position_keys(c, k, q).transpose(1, 2)  # (H, K+C-1, Dh): W_R R_r for r = K-1 down to -(C-1)
    gathered = table[:, (k - 1) - distances]  # (H, C, K, Dh)
    ac = (q + s.pos_bias_u[:, None]) @ keys.transpose(-1, -2)
    bd = torch.einsum("bhcd,hckd->bhck", q + s.pos_bias_v[:, None], gathered)
    torch.testing.assert_close(s.logits(q, keys), (ac + bd) * s.scale)


@settings(max_examples=60, deadline=None)
@given(size=st.integers(1, 40), chunk=st.integers(0, 12), left=st.integers(-1, 5))
def test_chunk_mask_equals_its_definition(size, chunk, left):
    """Query i sees key j iff j's chunk is not after i's and at most ``left`` chunks before it."""
    mask = chunk_mask(size, chunk, left)
    for i in range(size):
        for j in range(size):
            if chunk == 0:
                expected = True
            else:
                qi, kj = i // chunk, j // chunk
                expected = kj <= qi and (left < 0 or qi - kj <= left)
            assert bool(mask[i, j]) == expected, (i, j)
