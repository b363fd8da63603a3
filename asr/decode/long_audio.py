"""Decoding inputs of any length in bounded memory: chunked encoding through ``stream_step``.

Axis legend: n samples, T feature frames, F feature bins, T' encoder frames, D model dim, B batch.

Chunked decoding with bounded left context (``chunk_size > 0``, ``left_chunks >= 0``) of a
long input (past :data:`STREAM_MIN_FRAMES` encoder frames) runs each utterance through the
encoder's ``stream_step``, a few seconds of features at a time:
the encoder then holds only its stream state (``left_chunks * chunk_size`` cached frames a
layer), whatever the length, where the chunk-masked ``forward`` holds every frame of every
layer (and, without the blocked attention, the (T', T') logits). Both compute the same
function: the streaming contract (``asr.model.encoder``, tests/streaming/test_stream_exact.py)
says stream_step equals the chunk-masked forward for any feeding pattern. What grows with the
length is the output the searches read, T' x D floats (52 MB an hour at D = 144). Shorter
batches keep the batched chunk-masked forward: for test-length utterances it was 2x (chunk 16)
to 6x (chunk 4) faster than streaming them one by one, with the same hypotheses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

# Feature frames handed to stream_step at a time (4 s): large enough that the per-call
# overhead vanishes, small enough that the frontend's buffer stays a few hundred KB.
STREAM_PIECE = 400
# Encoder frames (40 s at 40 ms) from which chunked decoding streams instead of masking.
STREAM_MIN_FRAMES = 1000


def streams_chunks(chunk_size: int, left_chunks: int, out_frames: int) -> bool:
    """Whether a batch of ``out_frames`` encoder frames is encoded through ``stream_step``: bounded
    left context and a long input."""
    return chunk_size > 0 and left_chunks >= 0 and out_frames > STREAM_MIN_FRAMES


def can_stream(encoder) -> bool:
    """Whether ``encoder`` encodes chunk by chunk through ``stream_step`` (a causal streaming encoder)."""
    return hasattr(encoder, "stream_step") and getattr(encoder, "causal", False)


def stream_chunks(encoder, feats: torch.Tensor, chunk_size: int, left_chunks: int,
                  piece: int = STREAM_PIECE, progress: Callable[[int], None] | None = None) -> Iterator[torch.Tensor]:
    """Encoder output of one utterance, chunk by chunk: (1, n', D) pieces that concatenate to
    ``encoder(feats[None], [T], chunk_size, left_chunks)``'s output.

    Args:
        encoder: a streaming encoder (``init_state``, ``stream_step``, ``online_cmn``).
        feats: (T, F) features of one utterance (before the model's normalization).
        progress: called with the feature frames of each piece once it is encoded.
    """
    if feats.dim() != 2:
        raise ValueError(f"feats must be one utterance (T, F), got {tuple(feats.shape)}.")
    state = encoder.init_state(1, chunk_size, left_chunks)
    norm = encoder.online_cmn()
    running = None if norm is None else norm.stream()  # the running mean forward applies, frame by frame
    total = feats.size(0)
    for start in range(0, max(total, 1), piece):
        x = feats[None, start : start + piece]  # (1, n, F)
        if running is not None:
            x = running.push(x)
        out, state = encoder.stream_step(x, state, final=start + piece >= total)
        if progress is not None:
            progress(x.size(1))
        if out.size(1) > 0:
            yield out


def encode_batch(model, feats: torch.Tensor, feat_lens: torch.Tensor, chunk_size: int = 0,
                 left_chunks: int = -1, progress: Callable[[int], None] | None = None,
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """``model.encode`` for decoding: (B, T, F), (B,) -> enc_out (B, T', D), enc_lens (B,).

    With bounded left context a long batch goes through :func:`stream_chunks` utterance by
    utterance (encoder memory independent of the length); otherwise, or for an encoder that
    cannot stream, the (chunk-masked) forward. Both give the same frames. ``progress`` is called
    with the feature frames encoded: piece by piece when streaming, else the batch's once at the end.
    """
    encoder = model.encoder
    if not can_stream(encoder) or not streams_chunks(chunk_size, left_chunks, int(encoder.output_length(feats.size(1)))):
        encoded = model.encode(feats, feat_lens, chunk_size=chunk_size, left_chunks=left_chunks)
        if progress is not None:
            progress(int(feat_lens.sum()))
        return encoded
    outs = []
    for b, n in enumerate(feat_lens.tolist()):
        chunks = list(stream_chunks(encoder, feats[b, :n], chunk_size, left_chunks, progress=progress))
        outs.append(torch.cat(chunks, dim=1)[0] if chunks else feats.new_zeros(0, encoder.output_size))  # (T'_b, D)
    enc_lens = torch.tensor([o.size(0) for o in outs], dtype=torch.long)
    return torch.nn.utils.rnn.pad_sequence(outs, batch_first=True), enc_lens  # (B, T', D)

