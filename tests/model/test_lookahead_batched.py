"""The chunk-lookahead forward batched across chunks (asr/model/lookahead.py) equals the loop over chunks
(``ConformerEncoder._forward_chunks``) in float64: every scheme, both conv paddings, phases, left
contexts, padded rows, lookahead past the last frame, forward and gradients."""

import pytest
import torch

from asr.model.encoder import build_encoder
from asr.model.lookahead import chunk_windows
from asr.model.positions import POSITION_SCHEMES

CASES = [(4, -1, 0), (4, 1, 2), (3, 0, 1), (5, 2, 0)]  # (chunk, left chunks, phase)


def _encoder(pos_enc, pad="depthwise", lookahead=2, kernel=3):
    torch.manual_seed(0)
    return build_encoder(pos_enc, input_dim=8, d_model=16, num_heads=2, num_layers=2, ffn_dim=32, conv_kernel=kernel,
                         chunk_lookahead=lookahead, conv_causal_pad=pad).double().eval()


def _loop(enc, x, lens, chunk, left, phase):
    emb = enc.dropout(enc.scheme.embed_input(enc._embed((x - enc.cmvn_mean) * enc.cmvn_istd), 0))
    return enc._forward_chunks(emb, enc.output_length(lens), chunk, left, phase, 0, enc.chunk_lookahead)[0]


@pytest.mark.parametrize("pos_enc", POSITION_SCHEMES)
@pytest.mark.parametrize("pad", ["depthwise", "input"])
def test_batched_windows_equal_the_loop(pos_enc, pad):
    enc = _encoder(pos_enc, pad)
    g = torch.Generator().manual_seed(1)
    x, lens = torch.randn(3, 120, 8, generator=g, dtype=torch.float64), torch.tensor([120, 90, 57])
    for chunk, left, phase in CASES:
        got, out_lens = enc(x, lens, chunk_size=chunk, left_chunks=left, chunk_phase=phase)
        ref = _loop(enc, x, lens, chunk, left, phase)
        valid = torch.arange(got.size(1))[None] < out_lens[:, None]
        torch.testing.assert_close(got[valid], ref[valid], rtol=0, atol=1e-12)


@pytest.mark.parametrize("lookahead,kernel", [(1, 1), (4, 5), (7, 3)])
def test_batched_gradients_equal_the_loop(lookahead, kernel):
    enc = _encoder("rel_xl", lookahead=lookahead, kernel=kernel)
    g = torch.Generator().manual_seed(2)
    x, lens = torch.randn(2, 77, 8, generator=g, dtype=torch.float64), torch.tensor([77, 40])
    weights = torch.randn(2, 18, 16, generator=g, dtype=torch.float64)
    grads = []
    for run in (lambda: enc(x, lens, chunk_size=3, left_chunks=1, chunk_phase=1)[0],
                lambda: _loop(enc, x, lens, 3, 1, 1)):
        enc.zero_grad()
        out = run()
        valid = (torch.arange(out.size(1))[None] < enc.output_length(lens)[:, None])[..., None]
        (out * weights * valid).sum().backward()
        grads.append([p.grad.clone() for p in enc.parameters() if p.grad is not None])
    assert len(grads[0]) == len(grads[1]) > 0
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-11)


def test_windows_cover_every_frame_once():
    win = chunk_windows(total=11, chunk_size=4, left_chunks=1, phase=1, lookahead=2, device=torch.device("cpu"))
    assert win.starts.tolist() == [0, 3, 7] and win.cached == 4
    assert sorted(win.window.reshape(-1)[win.own_index].tolist()) == list(range(11))  # each frame is one chunk's
    assert win.window[0].tolist() == [0, 1, 2, 11, 12, 17]  # 3 own, 2 lookahead, then the zero frame
    assert win.window[2].tolist() == [7, 8, 9, 10, 17, 17]  # the last chunk: no lookahead past T'
    assert win.times[1].tolist() == [-1, 0, 1, 2, 3, 4, 5, 6, 7, 8]  # M = 4 cached (one before the start), W = 6
