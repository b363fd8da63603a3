"""The chunked forward with chunk lookahead, every chunk of a layer at once.

Axis letters: B batch, T' encoder frames, D model dim, H heads, Dh head dim, N chunks,
C chunk size, r lookahead frames, W = C + r window frames, M cached (left-context) frames.

With lookahead r, chunk k encodes its window, frames [s_k, e_k) of the chunk grid and the r frames
after them, with every layer's keys and values of the last M chunk frames before s_k and the conv
inputs just before s_k (``ConformerEncoder._forward_chunks``, a loop over chunks, is the reference).
Within one layer no chunk needs another chunk's output of that layer: the cached keys and values
are projections of the layer's input, and the conv context is the post-attention state of earlier
frames, both of which exist for every frame once the layer's attention has run. So a layer runs as:

* a *main* stream (B, T', D): each frame as its own chunk's pass sees it, and a *private* stream
  (B, N, r, D): each chunk's lookahead frames as that chunk's pass sees them (its outputs there
  are dropped; the next chunk encodes those frames again as its own);
* first feed-forward on both (per frame), keys and values of the main stream, and each chunk's
  window (B*N, W, D) gathered from both, attending to its window and M cached main-stream frames
  (times contiguous: queries are the last W of the M + W keys, as in a stream);
* the windows' post-attention states gathered back into the main stream, whose conv inputs give
  each window's conv its left context (kernel-1 frames before the window, as a stream's cache);
* the last feed-forward and norm per frame, and the streams taken apart again.

The block's own modules do the arithmetic; only the order differs, so dropout aside the result is
the loop's (tests/model/test_lookahead_batched.py compares them in float64).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from asr.model.conformer import ConformerBlock


@dataclass(frozen=True)
class ChunkWindows:
    """Index tensors (no data) of the chunks' windows.

    window: (N, W) each window frame's index in ``cat(main (T'), private (N*r), one zero frame)``
        (the zero frame past the window's end).
    times: (N, M + W) time of each key of chunk k (its M cached frames, then its window); a frame that
        does not exist has time -1 (before the start) or T' (past the window's end).
    starts: (N,) s_k, the first frame of each chunk.
    cache_index: (N, M) the main-stream frame of each cached key (clamped where it does not exist).
    own_index: (T',) where each main frame is its chunk's own, in the (N*W) windows.
    private_index: (N, r) where each chunk's lookahead frames are in the (N*W) windows (clamped).
    """

    window: Tensor
    times: Tensor
    starts: Tensor
    cache_index: Tensor
    own_index: Tensor
    private_index: Tensor

    @property
    def cached(self) -> int:
        return self.cache_index.size(1)


@functools.lru_cache(maxsize=256)
def chunk_windows(total: int, *, chunk_size: int, left_chunks: int, phase: int, lookahead: int,
                  device: torch.device) -> ChunkWindows:
    """The windows of the grid ``(t + phase) // C`` over ``total`` frames, lookahead r = ``lookahead`` >= 1.

    Built on the host once per shape and kept (read-only): a training step then neither rebuilds them
    nor waits for their copy to the device."""
    first = chunk_size - phase
    starts = [0] + list(range(first, total, chunk_size))
    ends = starts[1:] + [total]
    n, width = len(starts), chunk_size + lookahead
    budget = starts[-1] if left_chunks < 0 else min(left_chunks * chunk_size, starts[-1])
    window = torch.full((n, width), total + n * lookahead, dtype=torch.long)
    times = torch.full((n, budget + width), total, dtype=torch.long)
    own_index = torch.empty(total, dtype=torch.long)
    private_index = torch.zeros(n, lookahead, dtype=torch.long)
    for k, (s, e) in enumerate(zip(starts, ends)):
        private = min(e + lookahead, total) - e
        window[k, : e - s] = torch.arange(s, e)
        window[k, e - s : e - s + private] = total + k * lookahead + torch.arange(private)
        times[k, :budget] = torch.arange(s - budget, s).clamp(min=-1)
        times[k, budget : budget + e - s + private] = torch.arange(s, e + private)
        own_index[s:e] = k * width + torch.arange(e - s)
        private_index[k] = k * width + (e - s + torch.arange(lookahead)).clamp(max=width - 1)
    cache_index = times[:, :budget].clamp(min=0)
    return ChunkWindows(*(_to_device(t, device) for t in (window, times, torch.tensor(starts), cache_index, own_index,
                                                          private_index)))


def _to_device(t: Tensor, device: torch.device) -> Tensor:
    """``t`` on ``device``; to a GPU through pinned memory, so that the copy does not block the host."""
    if device.type != "cuda":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


def _ff_in(block: ConformerBlock, x: Tensor) -> Tensor:
    return x + 0.5 * block.dropout(block.ff_in(block.norm_ff_in(x)))


def _block_windows(block: ConformerBlock, main: Tensor, private: Tensor, *, win: ChunkWindows, valid: Tensor,
                   out_lens: Tensor, start_time: int | Tensor) -> tuple[Tensor, Tensor]:
    """One block over every window: main (B, T', D) and private (B, N, r, D) -> the same after the block.

    valid: (B, N, M + W) bool, the keys that exist and lie before the row's end (out_lens (B,)).
    """
    bsz, total, d = main.shape
    n, width = win.window.shape
    lookahead = private.size(2)
    main_a, private_a = _ff_in(block, main), _ff_in(block, private)
    source = torch.cat((main_a, private_a.reshape(bsz, n * lookahead, d), main_a.new_zeros(bsz, 1, d)), dim=1)
    windows = source[:, win.window].reshape(bsz * n, width, d)  # (B*N, W, D)
    cache = None
    if win.cached:
        k, v = block.attn.memory_kv(block.norm_attn(main_a))  # each (B, H, T', Dh)
        heads, dh = k.shape[1], k.shape[3]
        cache = tuple(t[:, :, win.cache_index].transpose(1, 2).reshape(bsz * n, heads, win.cached, dh)
                      for t in (k, v))  # (B*N, H, M, Dh) each
    if isinstance(start_time, int):
        times = (start_time + win.starts).repeat(bsz)  # (B*N,): each window's first frame
    else:
        times = (start_time[:, None] + win.starts[None]).reshape(-1)
    mask = valid.reshape(bsz * n, 1, win.cached + width)  # (B*N, 1, M + W)
    a, _ = block.attn(block.norm_attn(windows), mask, cache, times)
    x = windows + block.dropout(a)  # (B*N, W, D)
    # The conv's left context of each window: the causal inputs (ConvModule's ``causal_pad``) of the main
    # stream's post-attention frames just before it, zeros before t = 0 and past a row's end, as a cache.
    context = block.conv.kernel - 1
    conv_cache = None
    if context:
        main_att = x.reshape(bsz, n * width, d)[:, win.own_index]  # (B, T', D)
        inputs = block.norm_conv(main_att)
        if block.conv.causal_pad == "depthwise":
            inputs = nn.functional.glu(block.conv.pointwise_in(inputs), dim=-1)
        main_valid = torch.arange(total, device=main.device)[None] < out_lens[:, None]  # (B, T')
        inputs = torch.cat((inputs.masked_fill(~main_valid[..., None], 0.0), inputs.new_zeros(bsz, 1, d)), dim=1)
        before = win.starts[:, None] - context + torch.arange(context, device=main.device)  # (N, ctx)
        conv_cache = inputs[:, before.masked_fill(before < 0, total)]  # (B, N, ctx, D); index T': zeros
        conv_cache = conv_cache.reshape(bsz * n, context, d).transpose(1, 2)  # (B*N, D, ctx)
    c, _ = block.conv(block.norm_conv(x), mask[:, 0, win.cached:], conv_cache)
    x = x + block.dropout(c)
    x = x + 0.5 * block.dropout(block.ff_out(block.norm_ff_out(x)))
    x = block.norm_final(x).reshape(bsz, n * width, d)
    return x[:, win.own_index], x[:, win.private_index.reshape(-1)].reshape(bsz, n, lookahead, d)


def forward_windows(blocks: nn.ModuleList, x: Tensor, out_lens: Tensor, *, chunk_size: int, left_chunks: int,
                    phase: int, start_time: int, lookahead: int) -> Tensor:
    """Every block over every chunk's window at once: x (B, T', D) embedded frames -> (B, T', D) before
    the encoder's final norm; the loop ``ConformerEncoder._forward_chunks`` computes the same."""
    bsz, total, _ = x.shape
    win = chunk_windows(total, chunk_size=chunk_size, left_chunks=left_chunks, phase=phase, lookahead=lookahead,
                        device=x.device)
    valid = (win.times[None] >= 0) & (win.times[None] < out_lens[:, None, None])  # (B, N, M + W)
    private = torch.cat((x, x.new_zeros(bsz, lookahead, x.size(2))), dim=1)[
        :, (win.starts[1:, None] + torch.arange(lookahead, device=x.device)).clamp(max=total)]  # (B, N-1, r, D)
    private = torch.cat((private, x.new_zeros(bsz, 1, lookahead, x.size(2))), dim=1)  # the last chunk has none
    for block in blocks:
        x, private = _block_windows(block, x, private, win=win, valid=valid, out_lens=out_lens, start_time=start_time)
    return x
