"""Never an OOM kill: the peak memory of encoding a batch, estimated before it runs, against a budget.

Axis legend: B batch, T feature frames, F feature bins, T' encoder frames, D model dim, H heads,
Dh head dim, V vocab, C chunk size.

Why: a 20-minute file decoded at full context was killed by the kernel after 36 s at 24 GB
resident, with no message, and the utterances after it were never decoded. The estimate here
is a sum over what a forward holds at its peak (features and their normalization, the
subsampling convolutions, one Conformer layer's activations, the attention's working set,
the CTC output); the evaluation (``asr.evaluation.split``) asks it for every batch and

* decodes a batch over the budget one utterance at a time;
* decodes an utterance that is over it with the explicit attention but within it with the
  blocked attention (``asr.model.scorers.blocked``) under ``blocked.forced()``;
* skips, counts and names in one line an utterance that fits neither (what to do instead:
  chunked decoding with bounded left context, whose memory does not grow with the length).

The coefficients are checked against the measured peak RSS of the quickstart model: the estimate
is 1.1-2x the measured growth, never below it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from asr.decode.long_audio import STREAM_PIECE, streams_chunks
from asr.model.encoder import EMBED_PIECE, ConformerEncoder
from asr.model.scorers import blocked as blocked_attention

FLOAT = 4  # bytes: every activation is float32 on the CPU decoding path
# Share of the memory available when the evaluation starts that its forwards may take by default:
# the rest is headroom for the allocator's fragmentation and the machine's other processes.
DEFAULT_BUDGET_SHARE = 0.8


def available_bytes() -> int:
    """MemAvailable of /proc/meminfo (what the kernel can hand out without swapping), else physical memory."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import os

    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def default_budget() -> int:
    """:data:`DEFAULT_BUDGET_SHARE` of the memory available now."""
    return int(available_bytes() * DEFAULT_BUDGET_SHARE)


def parse_bytes(text: str) -> int:
    """'8G', '512M', '1.5GiB', '2000000' -> bytes (powers of 1024)."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)(i?b)?\s*", text.lower())
    if match is None:
        raise ValueError(f"memory size {text!r} is not a number with an optional K, M, G or T suffix (e.g. 8G).")
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[match.group(2)]
    return int(float(match.group(1)) * scale)


def format_bytes(n: int) -> str:
    """Bytes in the largest unit of :func:`parse_bytes` that keeps the number >= 1, to one decimal
    (a whole number without it): 50M -> '50 MiB', 6G -> '6 GiB', 1536M -> '1.5 GiB'."""
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f}".removesuffix(".0") + f" {unit}"
    return f"{n} bytes"


@dataclass(frozen=True)
class EncoderShape:
    """What the estimate needs to know of a :class:`ConformerEncoder`."""

    input_dim: int
    d_model: int
    heads: int
    layers: int
    ffn_dim: int
    channels: int
    online_cmn: bool
    blocked: bool  # its scorers have a blocked path (rel_xl, shaw, rel_bias, wenet_rel)
    explicit: bool  # its scorers build (B, H, C, K) logits (else SDPA's fused kernel)

    @classmethod
    def of(cls, encoder) -> EncoderShape | None:
        """None for an encoder this module does not know (no guard then)."""
        if not isinstance(encoder, ConformerEncoder):
            return None
        block = encoder.blocks[0]
        scorer = block.attn.scorer
        return cls(encoder.input_dim, encoder.d_model, block.attn.num_heads, len(encoder.blocks),
                   block.ff_in.net[0].out_features, encoder.subsampling.conv[0].out_channels,
                   encoder.online_cmn_frames > 0, getattr(scorer, "has_blocked_path", False),
                   getattr(scorer, "explicit_logits", True))


def estimate_encode_bytes(model, batch: int, frames: int, chunk_size: int = 0, left_chunks: int = -1,
                          blocked: bool | None = None) -> int | None:
    """Peak bytes a decoding forward of ``batch`` utterances padded to ``frames`` feature frames adds.

    ``blocked``: None lets each attention call choose (``blocked.use_blocked``), True as under
    ``blocked.forced()`` (for a model with a blocked path), False the explicit path throughout.
    Returns None for an encoder of a kind this module does not know.
    """
    shape = EncoderShape.of(model.encoder)
    if shape is None:
        return None
    enc = model.encoder
    vocab = model.ctc_proj.out_features
    out_frames = int(enc.output_length(frames))
    b, d = batch, shape.d_model
    outputs = b * out_frames * (2 * d + 2 * vocab) * FLOAT  # encoder output, CTC logits and log-probs
    if streams_chunks(chunk_size, left_chunks, out_frames):
        # One utterance at a time through stream_step: a chunk's working set, its cache and a piece.
        keys = (left_chunks + 1) * chunk_size
        per_chunk = chunk_layer_bytes(shape, 1, chunk_size, keys, blocked=False)
        cache = shape.layers * 2 * keys * d * FLOAT
        piece = enc.output_length(STREAM_PIECE + enc.subsampling.window)
        return outputs + per_chunk + cache + subsampling_bytes(shape, 1, piece) + 8 * STREAM_PIECE * shape.input_dim
    # The padded features, their normalization (float64 running sums under online CMN) and the
    # subsampling's conv activations for one piece (asr.model.encoder.EMBED_PIECE).
    feats = b * frames * shape.input_dim * (28 if shape.online_cmn else 12)
    embed = subsampling_bytes(shape, b, min(out_frames, EMBED_PIECE)) + 2 * b * out_frames * d * FLOAT
    return outputs + feats + embed + chunk_layer_bytes(shape, b, out_frames, out_frames, blocked, chunk_size)


def subsampling_bytes(shape: EncoderShape, batch: int, out_frames: int) -> int:
    """Conv activations (each conv's output and its ReLU) for ``out_frames`` encoder frames."""
    first = batch * shape.channels * (2 * out_frames + 1) * ((shape.input_dim - 1) // 2) * FLOAT
    return 2 * first + first // 2  # the second conv's output is a quarter of the first, twice


def chunk_layer_bytes(shape: EncoderShape, batch: int, queries: int, keys: int, blocked: bool | None,
                      chunk_size: int = 0) -> int:
    """One Conformer layer's activations for C = ``queries`` frames against K = ``keys`` plus its attention."""
    b, d, h = batch, shape.d_model, shape.heads
    layer = b * queries * (2 * shape.ffn_dim + 12 * d) * FLOAT
    logits = b * h * queries * keys
    take_blocked = shape.blocked and (blocked or (blocked is None and logits >= blocked_attention.BLOCKED_MIN_LOGITS_NO_GRAD))
    mask = b * queries * keys if chunk_size > 0 else b * keys  # bool (B, C, K), made per call
    if take_blocked:
        # A few (B*H, c, k) step buffers, the relative table and its projection (2K rows of D).
        step = min(logits, blocked_attention.DEFAULT_BLOCKING.pair_elements)
        attention = 5 * step * FLOAT + 8 * (queries + keys) * d * FLOAT
    elif shape.explicit:
        attention = 3 * logits * FLOAT + 2 * mask  # logits, probabilities, rel_xl's band; the mask and its copy
    else:
        attention = 4 * b * (queries + keys) * d * FLOAT + 2 * mask + (logits * FLOAT if chunk_size > 0 else 0)
    return layer + attention


def plan_batch(model, frames: list[int], batch: list[int], chunk_size: int, left_chunks: int,
               budget: int) -> tuple[list[tuple[list[int], bool]], list[tuple[int, int]]]:
    """How to decode utterances ``batch`` (indices into ``frames``, their feature frames) within ``budget``.

    Returns (groups, over): groups are (indices, blocked) to decode together, ``blocked`` under
    ``blocked.forced()``; over are (index, estimated bytes) of utterances that fit neither way.
    The whole batch when it fits (or the encoder is of a kind the estimate does not know).
    """
    need = estimate_encode_bytes(model, len(batch), max(frames[i] for i in batch), chunk_size, left_chunks)
    if need is None or need <= budget:
        return [(batch, False)], []
    groups, over = [], []
    for i in batch:
        need = estimate_encode_bytes(model, 1, frames[i], chunk_size, left_chunks)
        if need <= budget:
            groups.append(([i], False))
            continue
        if EncoderShape.of(model.encoder).blocked:
            need_blocked = estimate_encode_bytes(model, 1, frames[i], chunk_size, left_chunks, blocked=True)
            if need_blocked <= budget:
                groups.append(([i], True))
                continue
            need = min(need, need_blocked)
        over.append((i, need))
    return groups, over
