"""Exact attention in blocks for the schemes with a positional logit term (rel_xl, shaw, rel_bias;
wenet_rel with the plain term over its joint queries and keys).

Axis legend: B batch, H heads, C queries, K keys (the queries are the last C keys: query a
sits at local time M + a, M = K - C, key b at time b), Dh head dim, c queries of a block,
k keys of a block, N = 2d+1 clipped-distance buckets (shaw, rel_bias; d = max_distance).

Why: the explicit-logit scorers build (B, H, C, K) logits, and training saves them for
backward: 3 GB for a 5-minute file at full context, a kernel OOM kill at 20 minutes. No
fused kernel takes these position terms on CPU (Transformer-XL's bd term is a matmul against
a band of a projected table, not a per-element score_mod). Here the queries go in blocks of c
and the keys in blocks of k; per block pair the scheme's :class:`PositionTerm` builds only the
(c, k) logits it needs (rel_xl: the c + k - 1 rows of its projected table the pair's
distances use, shifted with the strided ``rel_shift``; shaw and rel_bias: the band of clipped
buckets; each term lives with its scheme: ``rel_xl.RelXLTerm``, ``shaw.ShawTerm``,
``rel_bias.RelBiasTerm``), and an online softmax (running max and sum, FlashAttention's) folds the key blocks
together. The backward recomputes each block pair's probabilities from the saved row
log-sum-exp (FlashAttention-2's scheme), so nothing of size C x K is ever kept: the memory
of a call is O((C + K) Dh) plus one block pair. Attention dropout draws each pair's keep
mask from its own generator (the call's seed plus the pair's index), so the backward draws
the same masks again instead of keeping them.

Masks: None, a dense bool (B, C|1, K) tensor (sliced per block), or an
``asr.model.masks.ChunkMask``: with it the key blocks a query block cannot see (beyond the
left context, after its chunk, padding) are never visited, so chunked attention with bounded
left context costs O(C x context), not O(C x K).

The explicit path stays the oracle (tests/model/test_blocked_attention.py compares both with
float64, gradients included); :func:`use_blocked` picks this path per call by size.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Optional, Union

import torch
from torch import Tensor

from asr.model.masks import ChunkMask
from asr.model.scorers.band import add_band_, band_sums
from asr.model.scorers.base import check_mask

Mask = Union[None, Tensor, ChunkMask]

# The blocked path is taken when a call's explicit logits (B*H*C*K floats) reach this many
# elements. With gradients: 2^26 (256 MiB in fp32; the explicit path holds about three such
# buffers at its peak in training); below it the explicit path is about as fast on CPU (it does
# not recompute the logits in backward and runs fewer, larger kernels; scripts/bench_attention.py),
# above it its memory is what matters. Without gradients (decoding) the blocked path is the
# faster one from a few million logits on (data/results/attention.md): 2^23.
BLOCKED_MIN_LOGITS = 1 << 26
BLOCKED_MIN_LOGITS_NO_GRAD = 1 << 23
_FORCED = False


@dataclass(frozen=True)
class Blocking:
    """Block sizes of a call: c queries by k keys per step.

    By default they follow from ``pair_elements``, the size of one step's (B*H, c, k) logits
    (2^22 floats, 16 MiB): one key block as wide as the keys up to ``pair_elements / (B*H*64)``
    (so a few thousand keys need no online rescaling), and as many query rows as fit, at most
    an eighth of the key block. Few, large steps matter on CPU: every step is a dozen kernels,
    and with two threads on a busy machine each kernel's barrier waits for a descheduled
    thread, so small blocks cost several times their flops; past a few MiB a step falls out of
    cache (data/results/attention.md). ``query_block`` and ``key_block`` fix the sizes
    instead (tests use tiny ones).
    """

    pair_elements: int = 1 << 22
    query_block: Optional[int] = None
    key_block: Optional[int] = None

    def __post_init__(self) -> None:
        for name in ("query_block", "key_block"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} ({value}) must be >= 1 (or None: from pair_elements).")
        if self.pair_elements < 1:
            raise ValueError(f"pair_elements ({self.pair_elements}) must be >= 1.")

    def sizes(self, rows: int, queries: int, keys: int) -> tuple[int, int]:
        """(c, k) for ``rows`` = B*H query rows per block step, C queries, K keys."""
        kb = self.key_block or max(256, min(keys, self.pair_elements // (rows * 64)))
        # At most an eighth of the key block: rel_xl's window of c + k - 1 rows costs (c + k - 1) / k
        # times the q k^T product, so tall query blocks pay for it (data/results/attention.md).
        cb = self.query_block or max(16, min(queries, self.pair_elements // (rows * min(kb, keys)),
                                             max(64, min(kb, keys) // 8)))
        return cb, kb


DEFAULT_BLOCKING = Blocking()


def use_blocked(batch: int, heads: int, queries: int, keys: int, grad: bool = True) -> bool:
    """Whether a call of B x H x C queries against K keys takes the blocked path.

    When its logits would reach :data:`BLOCKED_MIN_LOGITS` elements (``grad``: a backward will
    follow) or :data:`BLOCKED_MIN_LOGITS_NO_GRAD`, or always inside :func:`forced`.
    """
    threshold = BLOCKED_MIN_LOGITS if grad else BLOCKED_MIN_LOGITS_NO_GRAD
    return _FORCED or batch * heads * queries * keys >= threshold


def needs_grad(*tensors: Tensor) -> bool:
    """Whether autograd will record a call on these inputs."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


@contextmanager
def forced():
    """Every scorer with a blocked path takes it inside this block, whatever the size (as
    ``torch.nn.attention.sdpa_kernel`` picks SDPA's kernel): the decoding memory guard uses it
    when a full-context forward would not fit its budget otherwise."""
    global _FORCED
    before, _FORCED = _FORCED, True
    try:
        yield
    finally:
        _FORCED = before


def is_forced() -> bool:
    """Whether a :func:`forced` block is active."""
    return _FORCED


def dense_mask_bytes(batch: int, queries: int, keys: int) -> int:
    """Bytes of the dense bool mask a :class:`ChunkMask` of that size would build."""
    return batch * queries * keys


class PositionTerm:
    """A scheme's logits for one block pair, and their gradient.

    ``tensors``: the inputs (besides q, k, v) the logits depend on, in the order the autograd
    Function receives them and returns their gradients. Subclasses build logits for queries
    [a0, a1) and keys [b0, b1) of a call whose query a sits at time ``offset + a``.
    """

    def __init__(self, *tensors: Tensor) -> None:
        self.tensors = tensors
        self.grads: list[Optional[Tensor]] = [None] * len(tensors)

    def start(self, batch: int, heads: int, queries: int, keys: int, offset: int, backward: bool) -> None:
        """Called once per call before any block (shapes known); ``backward``: gradients will be asked for."""
        self.batch, self.heads, self.queries, self.keys, self.offset = batch, heads, queries, keys, offset

    def logits(self, q: Tensor, k: Tensor, a0: int, a1: int, b0: int, b1: int) -> Tensor:
        """q (B*H, c, Dh) scaled query block, k (B*H, k, Dh) key block -> a fresh (B*H, c, k) logits tensor."""
        return torch.bmm(q, k.transpose(1, 2))

    def backward(self, ds: Tensor, a0: int, a1: int, b0: int, b1: int) -> None:
        """Accumulate the gradients of ``tensors`` for the logits gradient ds (B*H, c, k) of one block pair."""

    def finish(self) -> list[Optional[Tensor]]:
        """The gradients of ``tensors`` after every block pair."""
        return self.grads

    def pair_offset(self, a0: int, b0: int) -> int:
        """Time of query a0 minus time of key b0."""
        return self.offset + a0 - b0


class _BlockedAttention(torch.autograd.Function):
    """out = softmax(term logits, masked) v [+ bucket_sums(probs) rel_v], in blocks; see the module docstring.

    Args (forward): q (B, H, C, Dh) scaled queries against the keys; q_bias: None or (H, Dh) added
    to every query against the keys (Transformer-XL's u: added per block, so q + u is never kept);
    k, v (B, H, K, Dh);
    rel_v: None or Shaw's (N, Dh) value table; mask: see :data:`Mask`; blocking;
    dropout: the attention dropout rate (0: none), whose keep masks are drawn per block pair from
    ``seed`` and the pair's index, so the backward draws the very same ones;
    term: a fresh :class:`PositionTerm` (its tensors follow as the last inputs).
    """

    @staticmethod
    def forward(ctx, q, q_bias, k, v, rel_v, mask, blocking, dropout, seed, term, *term_tensors):
        b, h, c, _ = q.shape
        kk, dh = k.size(2), v.size(3)  # the values' width may differ from the queries' and keys'
        term.start(b, h, c, kk, kk - c, backward=False)
        q3, k3, v3 = (t.reshape(b * h, t.size(2), t.size(3)) for t in (q, k, v))  # (B*H, C|K, Dh)
        bias = None if q_bias is None else q_bias.repeat(b, 1)[:, None, :]  # (B*H, 1, Dh)
        out = q3.new_zeros(b * h, c, dh)
        lse = q3.new_full((b * h, c), float("inf"))  # +inf: a row that sees no key (its p is 0 in backward)
        bins = None if rel_v is None else q3.new_zeros(b * h, c, rel_v.size(0))  # (B*H, C, N)
        pair = 0
        for a0, a1, spans in _query_blocks(c, kk, mask, blocking, b * h):
            row_max = row_sum = acc = acc_bins = None
            q_block = q3[:, a0:a1] if bias is None else q3[:, a0:a1] + bias  # (B*H, c, Dh)
            for b0, b1 in spans:
                s = _masked_logits(term, q_block, k3, mask, b, h, a0, a1, b0, b1)  # (B*H, c, k)
                block_max = s.amax(-1)  # (B*H, c)
                new_max = block_max if row_max is None else torch.maximum(row_max, block_max)
                ref = new_max.masked_fill(new_max == float("-inf"), 0.0)  # rows that saw no key yet
                p = s.sub_(ref[..., None]).exp_()  # (B*H, c, k) unnormalized probabilities
                pair_sum = p.sum(-1)  # the normalizer counts every key, dropped or not
                if dropout > 0.0:
                    p = p.mul_(_keep_scaled(seed, pair, p, dropout))
                pair += 1
                pair_bins = None if rel_v is None else _bucket_sums(p, rel_v, term.pair_offset(a0, b0))
                if row_max is None:
                    row_sum, acc, acc_bins = pair_sum, torch.bmm(p, v3[:, b0:b1]), pair_bins
                else:
                    alpha = (row_max - ref).exp_()  # (B*H, c); 0 where nothing was seen before
                    row_sum = row_sum.mul_(alpha).add_(pair_sum)
                    acc = acc.mul_(alpha[..., None]).baddbmm_(p, v3[:, b0:b1])
                    if acc_bins is not None:
                        acc_bins = acc_bins.mul_(alpha[..., None]).add_(pair_bins)
                row_max = new_max
            if row_max is None:
                continue  # the block sees no key at all: zeros, lse +inf
            seen = row_sum > 0
            inv = torch.where(seen, 1.0 / row_sum.clamp_min(torch.finfo(row_sum.dtype).tiny), 0.0)
            out[:, a0:a1] = acc * inv[..., None]
            lse[:, a0:a1] = torch.where(seen, ref + row_sum.clamp_min(torch.finfo(row_sum.dtype).tiny).log(),
                                        float("inf"))
            if bins is not None:
                bins[:, a0:a1] = acc_bins * inv[..., None]
        if rel_v is not None:
            out = out.baddbmm_(bins, rel_v.expand(b * h, *rel_v.shape))
        ctx.save_for_backward(q3, q_bias, k3, v3, rel_v, out, lse, bins, *term_tensors)
        ctx.mask, ctx.blocking, ctx.term_type, ctx.dropout, ctx.seed = mask, blocking, type(term), dropout, seed
        ctx.dims = (b, h, c, kk, dh)
        return out.view(b, h, c, dh)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        q3, q_bias, k3, v3, rel_v, out, lse, bins, *term_tensors = ctx.saved_tensors
        b, h, c, kk, dh = ctx.dims
        mask, blocking = ctx.mask, ctx.blocking
        term = ctx.term_type(*term_tensors)
        term.start(b, h, c, kk, kk - c, backward=True)
        g3 = grad.reshape(b * h, c, dh).to(q3.dtype)
        row_dot = (g3 * out).sum(-1)  # (B*H, C): sum_j p_ij dp_ij, as out_i = sum_j p_ij value_ij
        grad_q, grad_k, grad_v = torch.zeros_like(q3), torch.zeros_like(k3), torch.zeros_like(v3)
        g_rel = grad_rel_v = None
        if rel_v is not None:
            g_rel = torch.matmul(g3, rel_v.t())  # (B*H, C, N): g_i . rel_v[bucket]
            grad_rel_v = torch.matmul(bins.reshape(-1, bins.size(-1)).t(), g3.reshape(-1, dh))  # (N, Dh)
        bias = None if q_bias is None else q_bias.repeat(b, 1)[:, None, :]  # (B*H, 1, Dh)
        pair = 0
        for a0, a1, spans in _query_blocks(c, kk, mask, blocking, b * h):
            q_block = q3[:, a0:a1] if bias is None else q3[:, a0:a1] + bias  # (B*H, c, Dh)
            for b0, b1 in spans:
                s = _masked_logits(term, q_block, k3, mask, b, h, a0, a1, b0, b1)
                p = s.sub_(lse[:, a0:a1, None]).exp_()  # (B*H, c, k) the forward's probabilities
                keep = None if ctx.dropout == 0.0 else _keep_scaled(ctx.seed, pair, p, ctx.dropout)
                pair += 1
                # Products land in fresh contiguous blocks, then one add into the strided slice:
                # a bmm into a (B*H, rows, Dh) slice of a longer tensor falls back to one gemm per row of B*H.
                used = p if keep is None else p * keep  # what the values were mixed with
                grad_v[:, b0:b1] += torch.bmm(used.transpose(1, 2), g3[:, a0:a1])
                dp = torch.bmm(g3[:, a0:a1], v3[:, b0:b1].transpose(1, 2))  # (B*H, c, k)
                if g_rel is not None:
                    dp = add_band_(dp, g_rel[:, a0:a1], term.pair_offset(a0, b0))
                if keep is not None:
                    dp = dp.mul_(keep)
                ds = dp.sub_(row_dot[:, a0:a1, None]).mul_(p)  # softmax backward
                grad_q[:, a0:a1] += torch.bmm(ds, k3[:, b0:b1])
                grad_k[:, b0:b1] += torch.bmm(ds.transpose(1, 2), q_block)
                term.backward(ds, a0, a1, b0, b1)
        grad_q = grad_q.view(b, h, c, -1)
        grad_bias = None if q_bias is None else grad_q.sum((0, 2))  # (H, Dh)
        return (grad_q, grad_bias, grad_k.view(b, h, kk, -1), grad_v.view(b, h, kk, -1), grad_rel_v, None, None, None,
                None, None, *term.finish())


def _keep_scaled(seed: int, pair: int, like: Tensor, dropout: float) -> Tensor:
    """The dropout keep mask of block pair ``pair`` scaled by 1 / (1 - dropout): (B*H, c, k) like ``like``.

    Drawn from its own generator seeded with ``seed + pair``, so forward and backward agree
    without keeping the masks."""
    gen = torch.Generator(device=like.device).manual_seed(seed + pair)
    keep = torch.empty_like(like).bernoulli_(1.0 - dropout, generator=gen)
    return keep.mul_(1.0 / (1.0 - dropout))


def _query_blocks(c: int, kk: int, mask: Mask, blocking: Blocking, rows: int):
    """(a0, a1, key spans [(b0, b1), ...]) per query block; spans cover only the keys the block may see."""
    m = kk - c
    cb, kb = blocking.sizes(rows, c, kk)
    for a0 in range(0, c, cb):
        a1 = min(c, a0 + cb)
        lo, hi = (0, kk) if not isinstance(mask, ChunkMask) else mask.key_span(m + a0, m + a1)
        yield a0, a1, [(b0, min(hi, b0 + kb)) for b0 in range(lo, hi, kb)]


def _masked_logits(term: PositionTerm, q_block: Tensor, k3: Tensor, mask: Mask, b: int, h: int,
                   a0: int, a1: int, b0: int, b1: int) -> Tensor:
    """The (B*H, c, k) logits of query block [a0, a1) (``q_block``) and keys [b0, b1), -inf where the mask forbids."""
    s = term.logits(q_block, k3[:, b0:b1], a0, a1, b0, b1)
    if mask is None:
        return s
    m = term.keys - term.queries
    if isinstance(mask, ChunkMask):
        block = mask.block(m + a0, m + a1, b0, b1)  # (B, c|1, k) or None
    else:
        block = mask[:, a0:a1] if mask.size(1) > 1 else mask
        block = block[:, :, b0:b1]
        block = None if bool(block.all()) else block
    if block is not None:
        s.view(b, h, a1 - a0, b1 - b0).masked_fill_(~block[:, None], float("-inf"))
    return s


def _bucket_sums(p: Tensor, rel_v: Tensor, offset: int) -> Tensor:
    """(B*H, c, k) -> (B*H, c, N): each row's probabilities summed per clipped-distance bucket."""
    return band_sums(p, (rel_v.size(0) - 1) // 2, offset)


def _blocked_attention(q: Tensor, k: Tensor, v: Tensor, mask: Mask, term: PositionTerm,
                      rel_v: Optional[Tensor] = None, blocking: Optional[Blocking] = None,
                      dropout: float = 0.0, q_bias: Optional[Tensor] = None) -> Tensor:
    """Exact masked attention in blocks.

    Args:
        q: (B, H, C, Dh) queries already scaled by 1/sqrt(Dh) (the ones dotted with the keys),
            the last C of the K key times.
        k, v: (B, H, K, Dh).
        mask: None, bool (B, C|1, K) (True = may attend) or a :class:`ChunkMask` over the keys' times.
        term: the scheme's :class:`PositionTerm`, built for this call.
        rel_v: Shaw's value table (N, Dh), or None.
        blocking: block sizes (None: :data:`DEFAULT_BLOCKING`).
        dropout: attention dropout on the probabilities (training); its seed is drawn from
            torch's global generator, as ``F.dropout`` draws its masks.
        q_bias: None or (H, Dh), added to every query against the keys (per block, never kept).
    Returns:
        (B, H, C, Dh); zeros for query rows with no allowed key.

    Kept out of torch.compile graphs (a Python loop over blocks with a custom backward, see
    :func:`blocked_attention`); the compiled training step only meets it for inputs past
    :data:`BLOCKED_MIN_LOGITS`.
    """
    check_mask(mask, q.size(0), q.size(2), k.size(2))
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout ({dropout}) must be in [0, 1).")
    seed = int(torch.randint(0, 1 << 62, ())) if dropout > 0.0 else 0
    return _BlockedAttention.apply(q, q_bias, k, v, rel_v, mask, blocking or DEFAULT_BLOCKING, dropout, seed, term,
                                   *term.tensors)


_GRAPH_EXCLUDED = None


def _graph_excluded():
    """:func:`_blocked_attention` wrapped by ``torch.compiler.disable``, made on the first call under
    torch.compile: the decorator imports torch._dynamo (seconds of start-up), which no eager decode, serve or
    export needs."""
    global _GRAPH_EXCLUDED
    if _GRAPH_EXCLUDED is None:
        _GRAPH_EXCLUDED = torch.compiler.disable(_blocked_attention)
    return _GRAPH_EXCLUDED


def blocked_attention(q: Tensor, k: Tensor, v: Tensor, mask: Mask, term: PositionTerm,
                      rel_v: Optional[Tensor] = None, blocking: Optional[Blocking] = None,
                      dropout: float = 0.0, q_bias: Optional[Tensor] = None) -> Tensor:
    """Exact masked attention in blocks (:func:`_blocked_attention`, whose arguments these are).
    Under torch.compile the call leaves the graph and runs eagerly (a graph break), as
    ``torch.compiler.disable`` does."""
    if torch.compiler.is_compiling():
        return _graph_excluded()(q, k, v, mask, term, rel_v, blocking, dropout, q_bias)
    return _blocked_attention(q, k, v, mask, term, rel_v, blocking, dropout, q_bias)
