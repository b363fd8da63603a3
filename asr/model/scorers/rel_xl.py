"""Transformer-XL relative attention (Dai et al. 2019, section 3.3) with a real rel_shift.

Per head, with r = i - j (query time minus key time):

    logit_ij = ((q_i + u) . k_j + (q_i + v) . W_R R_r) / sqrt(Dh)

R is a sinusoid over the SIGNED distance r, computed for the lengths asked (no
max_len). In one call r spans [-(C-1), K-1]: the K + C - 1 rows of P = W_R R are
ordered r = K-1 down to -(C-1), BD = (q + v) P^T is (B, H, C, K+C-1), and query
row a (time M + a) needs the K consecutive columns starting at C-1-a:

    bd[a, b] = BD[a, (C-1-a) + b]        (row a shifted left by C-1-a)

:func:`rel_shift` reads that as a zero-copy strided view; :func:`rel_shift_gather`
is the explicit index version kept as the oracle.

Query blocks: a block of c queries only touches K + c - 1 consecutive rows of P,
so the scorer cuts the C queries into blocks of ``query_block`` rows, multiplies
each block with its own window of P, and shifts each block with the same strided
view. For C = K = 512 and blocks of 64 that is 575 instead of 1023 positional
columns per query: about 45% less work and memory in the BD matmul and its
backward. The window of block n starts ``(nb-1-n) * c`` rows into P.

On CUDA (``asr.model.scorers.routes``) the same blocks give the shifted BD term alone,
(B, H, C, K), which a fused kernel adds to its own (q + u) k^T: FlexAttention reads it in a
score_mod, SDPA takes it as a float bias. The ``joint_sdpa`` route builds no such term: the
sinusoid of i - j is a rotation, so both terms are one dot product over joint channels that
plain SDPA computes (``asr.model.scorers.rel_xl_joint``).
"""

from __future__ import annotations


import torch
import torch.nn.functional as F
from torch import Tensor

from asr.model.scorers.attend import attend
from asr.model.scorers.base import AttentionScorer, check_qkv, prepare_mask, xl_position_parameters
from asr.model.scorers.blocked import Mask, PositionTerm, blocked_attention, needs_grad, use_blocked
from asr.model.scorers.fused import bias_kernel, flex_attend, sdpa_attend
from asr.model.scorers.rel_xl_joint import joint_attend
from asr.model.scorers.routes import EXPLICIT, FLEX, JOINT_SDPA, route_for
from asr.model.sinusoid import sinusoid_table
from asr.model.tracing import tracing


def rel_shift(bd_full: Tensor, keys: int) -> Tensor:
    """Relative-to-absolute shift as a strided view (no copy); any leading dims, any strides.

    Args:
        bd_full: (..., C, K+C-1), column n holds distance r = K-1-n for the row's query.
        keys: K.
    Returns:
        (..., C, K) view with out[..., a, b] = bd_full[..., a, C-1-a+b].
    """
    *lead, c, width = bd_full.shape
    if width != keys + c - 1:
        raise ValueError(f"rel_shift needs K+C-1 = {keys + c - 1} columns, got {width} (C={c}, K={keys}).")
    *lead_strides, sc, sr = bd_full.stride()
    # Element (a, b) lives at (C-1)*sr + a*(sc-sr) + b*sr: stepping one query row
    # moves one row down and one column left, i.e. stride sc - sr.
    return bd_full.as_strided(
        (*lead, c, keys), (*lead_strides, sc - sr, sr), bd_full.storage_offset() + (c - 1) * sr
    )


def rel_shift_reshape(bd_full: Tensor, keys: int) -> Tensor:
    """:func:`rel_shift` by pad and reshape (Transformer-XL's own trick): a copy, but only
    views and a pad, whose gradients a tracer keeps symbolic in every size (the strided
    view's backward pins the storage size, i.e. one compiled graph per length).

    Row a must start C-1-a columns in. With one zero column padded on the right (width
    W' = K+C), that is flat index (C-1) + a*(W'-1) + b of the flattened rows: C rows of
    stride K+C-1 from offset C-1, whose first K columns are the answer.
    """
    *lead, c, width = bd_full.shape
    if width != keys + c - 1:
        raise ValueError(f"rel_shift needs K+C-1 = {keys + c - 1} columns, got {width} (C={c}, K={keys}).")
    flat = F.pad(bd_full, (0, 1)).reshape(*lead, c * (width + 1))  # (..., C*(K+C))
    rows = flat[..., c - 1 : c - 1 + c * width].reshape(*lead, c, width)  # (..., C, K+C-1)
    return rows[..., :keys]  # (..., C, K)


def rel_shift_gather(bd_full: Tensor, keys: int) -> Tensor:
    """Explicit-index oracle for :func:`rel_shift`; same contract, returns a copy."""
    *lead, c, _ = bd_full.shape
    rows = torch.arange(c, device=bd_full.device)[:, None]
    cols = torch.arange(keys, device=bd_full.device)[None, :]
    index = (c - 1 - rows + cols).expand(*lead, c, keys)  # (..., C, K)
    return bd_full.gather(-1, index)


class _AddShiftedBlocks(torch.autograd.Function):
    """``ac += rel_shift(bd_full)`` in place, block by block, with a lean backward.

    Autograd would otherwise either copy the whole logits gradient twice (an
    in-place add into a 5-d view of ``ac``) or allocate a fresh logits tensor
    (an out-of-place add). On CPU each fresh (B, H, C, K) buffer costs page
    faults comparable to a full pass, so the add stays in place. The backward
    writes the band of ``bd_full``'s gradient and zeroes only the two (cb, cb-1)
    corners outside it, instead of zero-filling the whole buffer first.

    Args (forward):
        ac: (B, H, nb*cb, K) logits, modified in place and returned.
        bd_full: (H, nb, B, cb, K+cb-1) per-block positional logits.
    """

    @staticmethod
    def forward(ctx, ac: Tensor, bd_full: Tensor) -> Tensor:
        h, nb, b, cb, width = bd_full.shape
        keys = ac.size(-1)
        ctx.shape, ctx.bd_dtype = bd_full.shape, bd_full.dtype
        ac.view(b, h, nb, cb, keys).add_(rel_shift(bd_full, keys).permute(2, 0, 1, 3, 4))
        ctx.mark_dirty(ac)
        return ac

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, Tensor]:
        h, nb, b, cb, width = ctx.shape
        keys = grad.size(-1)
        grad_bd = grad.new_empty(ctx.shape, dtype=ctx.bd_dtype)  # (H, nb, B, cb, W)
        # Row t's band is columns [cb-1-t, cb-1-t+K): everything else lies in the
        # first cb-1 or the last cb-1 columns.
        grad_bd[..., : cb - 1].zero_()
        grad_bd[..., keys:].zero_()
        rel_shift(grad_bd, keys).copy_(grad.view(b, h, nb, cb, keys).permute(1, 2, 0, 3, 4))
        return grad, grad_bd


# (dim, device, dtype, inference_mode) -> table over r = N-1 down to -(N-1).
# One growing table per key instead of one per (K, C): dynamic chunk training
# asks for many (K, C) pairs and each is a contiguous slice of the big one.
_TABLES: dict[tuple, Tensor] = {}


def relative_sinusoids(keys: int, queries: int, dim: int, device: torch.device, dtype: torch.dtype) -> Tensor:
    """Sinusoid rows for r = K-1 down to -(C-1): (K+C-1, dim), a view of a cached table.

    Inference-mode tensors cannot be saved for backward, so they are cached apart.
    """
    need = max(keys, queries)
    if tracing():
        # A table built while torch.export / torch.compile traces is the tracer's tensor,
        # not data: cached, it corrupted every later eager step in the process
        # (data/results/attention.md). Build it fresh, keep nothing.
        r = torch.arange(keys - 1, -queries, -1, device=device, dtype=torch.float64)  # (K+C-1,)
        return sinusoid_table(r, dim).to(dtype)
    key = (dim, device, dtype, torch.is_inference_mode_enabled())
    table = _TABLES.get(key)
    if table is None or (table.size(0) + 1) // 2 < need:
        n = max(need, 2 * ((table.size(0) + 1) // 2) if table is not None else 256)
        # float64 angles: fp32 loses the fast channels' phase at thousands of frames.
        r = torch.arange(n - 1, -n, -1, device=device, dtype=torch.float64)  # (2n-1,)
        table = sinusoid_table(r, dim).to(dtype)
        _TABLES[key] = table
    center = (table.size(0) - 1) // 2  # row of r = 0
    return table[center - (keys - 1) : center + queries]


class RelXLScorer(AttentionScorer):
    """Transformer-XL scorer for one layer: learned ``pos_bias_u``, ``pos_bias_v`` (H, Dh)
    and a bias-free ``linear_pos`` (D -> D) projecting the relative sinusoid.

    Fast path: the ac matmul against K keys, a BD matmul per query block against
    its window of P, a strided rel_shift view, one add, masked softmax. Only the
    band of positional logits a call can use is computed, so a streaming chunk
    (C <= query_block) pays for (C, K+C-1) and nothing more.

    Args:
        query_block: queries per BD block (see the module docstring); C <= query_block
            is one block.
    """

    has_blocked_path = True
    scheme = "rel_xl"

    def __init__(self, num_heads: int, head_dim: int, dropout: float = 0.0, query_block: int = 64) -> None:
        super().__init__(num_heads, head_dim, dropout)
        if query_block <= 0:
            raise ValueError(f"query_block ({query_block}) must be > 0.")
        self.query_block = query_block
        self.linear_pos, self.pos_bias_u, self.pos_bias_v = xl_position_parameters(num_heads, head_dim)

    def position_keys(self, queries: int, keys: int, like: Tensor) -> Tensor:
        """P = W_R R for r = K-1 down to -(C-1): (H, Dh, K+C-1), dtype/device of ``like``."""
        d_model = self.num_heads * self.head_dim
        table = relative_sinusoids(keys, queries, d_model, like.device, like.dtype)  # (K+C-1, D)
        p = self.linear_pos(table)  # (K+C-1, D); learned, so projected on every call
        return p.view(-1, self.num_heads, self.head_dim).permute(1, 2, 0)  # (H, Dh, K+C-1)

    def _position_blocks(self, q: Tensor, keys: int) -> tuple[Tensor, Tensor, int]:
        """The BD term in query blocks, scaled, unshifted.

        Queries are padded at the FRONT to nb * cb rows (fake queries at earlier
        times), so every block has cb rows and the real ones are the last C.

        Returns:
            (q padded (B, H, nb*cb, Dh), bd_full (H, nb, B, cb, K+cb-1), pad).
        """
        b, h, c, dh = q.shape
        kk = keys
        cb = min(c, self.query_block)
        nb = -(-c // cb)
        pad = nb * cb - c
        if tracing():  # no branch on the sizes; cat (unlike a zero F.pad) always gives a contiguous copy
            q = torch.cat((q.new_zeros(b, h, pad, dh), q), dim=2)  # (B, H, nb*cb, Dh)
        elif pad:
            q = F.pad(q, (0, 0, pad, 0))  # (B, H, nb*cb, Dh)
        width = kk + cb - 1
        p = self.position_keys(nb * cb, kk, q)  # (H, Dh, K + nb*cb - 1)
        # Window m of P starts at row m*cb and serves query block nb-1-m, hence the flip.
        if tracing():  # a traced unfold (or strided view) pins every length: gather the windows' columns
            starts = torch.arange(nb, device=p.device) * cb  # (nb,)
            columns = (starts[:, None] + torch.arange(width, device=p.device)).reshape(-1)  # (nb*W,)
            windows = p.index_select(2, columns).view(h, dh, nb, width).permute(0, 2, 1, 3).flip(1)  # (H, nb, Dh, W)
        else:
            windows = p.unfold(2, width, cb).permute(0, 2, 1, 3).flip(1)  # (H, nb, Dh, W)
        # Blocks of all utterances share a window: fold B into the matmul rows.
        q_blocks = q.view(b, h, nb, cb, dh).permute(1, 2, 0, 3, 4).reshape(h, nb, b * cb, dh)
        # Scale folded into the (small) query side instead of the (C, K) logits.
        q_v = torch.add(self.pos_bias_v[:, None, None, :] * self.scale, q_blocks, alpha=self.scale)
        return q, torch.matmul(q_v, windows).view(h, nb, b, cb, width), pad  # (H, nb, B, cb, W)

    def _blocked_logits(self, q: Tensor, k: Tensor) -> tuple[Tensor, int]:
        """Scaled unmasked logits in query blocks (:meth:`_position_blocks`).

        Returns:
            (logits (B, H, nb*cb, K) whose first ``pad`` rows are fake, pad).
        """
        b, h = q.shape[:2]
        kk = k.size(2)
        q, bd_full, pad = self._position_blocks(q, kk)
        nb, cb = bd_full.shape[1], bd_full.shape[3]
        q_u = torch.add(self.pos_bias_u[:, None, :] * self.scale, q, alpha=self.scale)  # (B, H, nb*cb, Dh)
        ac = torch.matmul(q_u, k.transpose(-2, -1))  # (B, H, nb*cb, K)
        if tracing():  # out of place: the compiler fuses the shifted read into the add
            shifted = rel_shift_reshape(bd_full, kk).permute(2, 0, 1, 3, 4)  # (B, H, nb, cb, K)
            return (ac.view(b, h, nb, cb, kk) + shifted).view(b, h, nb * cb, kk), pad
        return _AddShiftedBlocks.apply(ac, bd_full), pad

    def position_bias(self, q: Tensor, keys: int) -> Tensor:
        """The scaled BD term alone, shifted: (B, H, C, K), bd[a, b] = (q_a + v) . P[r(a, b)] / sqrt(Dh);
        the float bias of the fused routes."""
        b, h, c, _ = q.shape
        _, bd_full, pad = self._position_blocks(q, keys)
        nb, cb = bd_full.shape[1], bd_full.shape[3]
        shift = rel_shift_reshape if tracing() else rel_shift
        bd = shift(bd_full, keys).permute(2, 0, 1, 3, 4).reshape(b, h, nb * cb, keys)  # a copy
        return bd[:, :, pad:]

    def _fused(self, route: str, q: Tensor, k: Tensor, v: Tensor, mask: Mask) -> Tensor:
        """The ``joint_sdpa``, ``flex`` or ``sdpa_bias`` route (``asr.model.scorers.routes``). Joint: both
        terms are one dot product over joint channels (no bias); otherwise the ac term is the kernel's
        own q k^T on q + u, the shifted BD term its bias."""
        dropout = self.dropout if self.training else 0.0
        if route == JOINT_SDPA:
            return joint_attend(q, k, v, mask, self.pos_bias_u, self.pos_bias_v, self.linear_pos.weight,
                                scale=self.scale, dropout=dropout)
        q_u = torch.add(self.pos_bias_u[:, None, :] * self.scale, q, alpha=self.scale)  # (B, H, C, Dh)
        bias = self.position_bias(q, k.size(2))  # (B, H, C, K)
        if route == FLEX and dropout == 0.0:
            return flex_attend(q_u, k, v, mask, bias_kernel, bias)
        return sdpa_attend(q_u, k, v, mask, dropout, bias=bias)

    def logits(self, q: Tensor, k: Tensor) -> Tensor:
        """Scaled unmasked logits (B, H, C, K), the same numbers ``forward`` uses."""
        logits, pad = self._blocked_logits(q, k)
        return logits[:, :, pad:]

    def forward(self, q: Tensor, k: Tensor, v: Tensor, mask: Mask) -> Tensor:
        b, _, c, kk, _ = check_qkv(q, k, v)
        route = route_for(self.scheme, q.device)
        if route != EXPLICIT:
            return self._fused(route, q, k, v, mask)
        if use_blocked(b, self.num_heads, c, kk, needs_grad(q, k, v, self.pos_bias_u)):
            # One scaled copy of q serves both terms (u and v are added per block): one (B, H, C, Dh)
            # tensor kept for backward instead of q + u and q + v.
            q_s = (q * self.scale).contiguous()  # (B, H, C, Dh)
            term = RelXLTerm(q_s, self.pos_bias_v * self.scale, self.position_keys(c, kk, q))
            return blocked_attention(q_s, k, v, mask, term, dropout=self.dropout if self.training else 0.0,
                                     q_bias=self.pos_bias_u * self.scale)
        mask4, row_valid = prepare_mask(mask, b, c, kk)
        logits, pad = self._blocked_logits(q, k)  # (B, H, pad + C, K)
        if mask4 is not None and mask4.size(2) > 1 and (tracing() or pad):
            # Fake rows may attend anywhere; their outputs are dropped below.
            fake_rows = mask4.new_ones(mask4.size(0), 1, pad, kk)
            mask4 = torch.cat((fake_rows, mask4), dim=2)  # (B, 1, pad + C, K)
        out = attend(logits, v, mask4, self.dropout, self.training)[:, :, pad:]  # (B, H, C, Dh)
        return out if row_valid is None else out * row_valid

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, query_block={self.query_block}"


# The blocked term reads windows of p this many rows wide at a time (see RelXLTerm.start).
WIDTH_STEP = 16


class RelXLTerm(PositionTerm):
    """The blocked attention's (``asr.model.scorers.blocked``) term for rel_xl, Transformer-XL's bd term:
    tensors q_s (B, H, C, Dh) = q / sqrt(Dh), v_s (H, Dh) = v / sqrt(Dh) and p (H, Dh, K + C - 1), the
    projected sinusoids of r = K-1 down to -(C-1); the bd queries q_s + v_s are made per call and not kept
    (the ac term's q_s + u_s is the core's ``q_bias``).

    A pair of c queries from time t and k keys from time s uses distances r in
    [t - s - k + 1, t - s + c - 1]: c + k - 1 consecutive rows of p, the window ``rel_shift``
    turns into the (c, k) band.
    """

    def start(self, batch, heads, queries, keys, offset, backward) -> None:
        super().start(batch, heads, queries, keys, offset, backward)
        q_s, v_s, _ = self.tensors
        # (H, C, B, Dh): a query block is then one (H, c*B, Dh) view, all utterances against one window.
        self.q_pos = (q_s + v_s[None, :, None, :]).permute(1, 2, 0, 3).contiguous()
        # Contiguous (a projected table is (R, H, Dh) underneath) and WIDTH_STEP zero rows longer, so
        # every window can be read WIDTH_STEP-aligned: MKL runs an unaligned width slower per flop
        # (data/results/attention.md).
        self.p = torch.nn.functional.pad(self.tensors[2], (0, WIDTH_STEP)).contiguous()  # (H, Dh, R + WIDTH_STEP)
        self._grad_bd: dict[tuple[int, int], Tensor] = {}
        if backward:
            self.grad_q_pos = torch.zeros_like(self.q_pos)
            self.grad_p = torch.zeros_like(self.tensors[2], memory_format=torch.contiguous_format)

    def _window(self, a0: int, a1: int, b0: int, b1: int, aligned: bool = False) -> tuple[Tensor, Tensor, int]:
        """(query block (H, c*B, Dh), its p window (H, Dh, c + k - 1), first row of the window in p);
        ``aligned``: the window widened to a multiple of WIDTH_STEP rows (the extra ones are not used)."""
        c, k = a1 - a0, b1 - b0
        first = (self.keys - 1) - (self.offset + a0 - b0 + c - 1)  # row of r = t - s + c - 1
        width = c + k - 1
        if aligned:
            width = -(-width // WIDTH_STEP) * WIDTH_STEP
        window = self.p[:, :, first : first + width]
        return self.q_pos[:, a0:a1].reshape(self.heads, c * self.batch, -1), window, first

    def logits(self, q, k, a0, a1, b0, b1):
        s = torch.bmm(q, k.transpose(1, 2))  # (B*H, c, k)
        c, kb = a1 - a0, b1 - b0
        qb, window, _ = self._window(a0, a1, b0, b1, aligned=True)
        bd = torch.bmm(qb, window).view(self.heads, c, self.batch, -1).permute(2, 0, 1, 3)  # (B, H, c, W')
        s.view(self.batch, self.heads, c, kb).add_(rel_shift(bd[..., : c + kb - 1], kb))
        return s

    def backward(self, ds, a0, a1, b0, b1) -> None:
        c, kb = a1 - a0, b1 - b0
        qb, window, first = self._window(a0, a1, b0, b1)
        width = c + kb - 1
        grad_bd = self._grad_bd.get((c, kb))
        if grad_bd is None:
            # Row a's band is columns [c-1-a, c-1-a+k); the copy below writes only the band, so the
            # corners of a buffer kept per block shape stay zero from pair to pair.
            grad_bd = self._grad_bd[(c, kb)] = ds.new_zeros(self.heads, c, self.batch, width)  # (H, c, B, W)
        rel_shift(grad_bd.permute(2, 0, 1, 3), kb).copy_(ds.view(self.batch, self.heads, c, kb))
        grad_bd = grad_bd.view(self.heads, c * self.batch, width)
        self.grad_q_pos[:, a0:a1] += torch.bmm(grad_bd, window.transpose(1, 2)).view(self.heads, c, self.batch, -1)
        self.grad_p[:, :, first : first + width] += torch.bmm(qb.transpose(1, 2), grad_bd)

    def finish(self):
        return [self.grad_q_pos.permute(2, 0, 1, 3), self.grad_q_pos.sum((1, 2)), self.grad_p]
