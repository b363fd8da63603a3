"""Translation probe: the same utterances streamed at a later absolute time; only absolute terms can tell.

A relative scheme with bounded left context computes the same function of a window of audio
wherever that window sits in the stream; ``abs_sin``, ``abs_learned`` and ``wenet_rel`` (whose
position term scores each key's ABSOLUTE time) do not. The probe decodes a fixed set of test
utterances as streams (chunk C, L left chunks) whose clock starts at 0 s, 60 s and 600 s.

What exactly is decoded, per utterance and offset S:

- the stream's clock starts at S: ``encoder.init_state(..., start_time=S / frame period)``,
  i.e. the state claims S seconds have already been streamed; no audio is encoded for them;
- the stream first receives a silent lead-in of ``lead_in_frames`` feature frames
  (default 256 = 64 encoder frames = 2.56 s, exactly the C16/L4 attention memory): the fbank
  of seeded white noise at -70 dBFS (:func:`lead_in_features`), the same for every utterance
  and offset, so the cache the utterance's first chunk attends to is full of silence, as in a
  stream that has been running, instead of empty;
- then the utterance's own feature frames; CTC greedy over the encoder frames after the
  lead-in (the lead-in is a whole number of chunks, so the utterance's chunking is the same at
  every offset).

The numbers are ``stream_step``'s: they are computed with the chunk-masked forward at that
clock (``encoder(..., start_time=)``), which the streaming contract makes identical to the
stream (tested at a 600 s clock for every scheme) and which batches utterances of different
lengths exactly. The same audio at every offset: a relative scheme's hypotheses are identical
(tested), so any difference is the position scheme reading the clock.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from asr.data.features import FRAME_SHIFT_S, SAMPLE_RATE, FbankExtractor, samples_for_frames
from asr.decode import ctc_greedy
from asr.decode.wer import ErrorCounter
from asr.evaluation.split import ModeResult, Utterance

OFFSETS_S: tuple[int, ...] = (0, 60, 600)
CHUNK, LEFT = 16, 4
LEAD_IN_FRAMES = 256  # 2.56 s: 64 encoder frames at 4x subsampling, the C16/L4 memory
LEAD_IN_DBFS = -70.0
LEAD_IN_SEED = 0


def lead_in_features(features=None, frames: int = LEAD_IN_FRAMES, dbfs: float = LEAD_IN_DBFS,
                     seed: int = LEAD_IN_SEED) -> torch.Tensor:
    """(frames, F) fbank (the model's ``features`` options; None: LEGACY) of seeded white noise at
    ``dbfs`` RMS: a quiet, fixed stretch of "silence".

    Not digital zeros: their log-mel is the floor log(eps) = -15.9 in every bin, far off any
    speech frame, which a running-mean frontend (online CMN) would drag its mean to.
    """
    samples = samples_for_frames(features, frames) + SAMPLE_RATE // 10  # spare audio: take the first frames
    noise = torch.randn(samples, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    feats = FbankExtractor(features)((noise * 10.0 ** (dbfs / 20.0)).float())[:frames]
    if feats.size(0) != frames:
        raise ValueError(f"the lead-in gave {feats.size(0)} frames, {frames} were asked")
    return feats


@torch.no_grad()
def shifted_log_probs(
    model, feats: Sequence[torch.Tensor], start_time: int, lead_in: torch.Tensor, chunk_size: int = CHUNK,
    left_chunks: int = LEFT, batch_size: int = 32,
) -> list[torch.Tensor]:
    """CTC log-probs (T'_i, V) of each utterance's frames, streamed after ``lead_in`` with the clock at ``start_time``.

    Computed with the chunk-masked forward at that clock, ``encoder(..., start_time=)``: what
    ``stream_step`` gives a stream started with ``init_state(start_time=)`` (the streaming
    contract, tested at a late clock for every scheme), but batched with key padding, so
    utterances of different lengths share a batch exactly.

    Args:
        feats: per utterance (T_i, F) features.
        start_time: absolute encoder time of the stream's first (lead-in) frame.
        lead_in: (L, F) features fed first; L must be a whole number of encoder chunks.
    """
    enc = model.encoder
    rate = enc.subsampling_rate
    # Encoder frame t reads input frames [rate * t, rate * t + window): the utterance's own
    # frames start at encoder frame L / rate (the one before straddles the seam).
    lead_frames = lead_in.size(0) // rate
    if lead_in.size(0) % (rate * chunk_size):
        raise ValueError(f"lead-in ({lead_in.size(0)} frames) must be a whole number of {chunk_size}-frame chunks "
                         f"at subsampling {rate}.")
    out: list[torch.Tensor | None] = [None] * len(feats)
    order = sorted(range(len(feats)), key=lambda i: feats[i].size(0))
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        lengths = torch.tensor([lead_in.size(0) + feats[i].size(0) for i in rows])
        batch = lead_in.new_zeros(len(rows), int(lengths.max()), lead_in.size(1))
        for b, i in enumerate(rows):
            batch[b, : lengths[b]] = torch.cat([lead_in, feats[i]])
        encoded, enc_lens = enc(batch, lengths, chunk_size, left_chunks, start_time=start_time)  # (B, T', D)
        log_probs = model.ctc_log_probs(encoded)
        for b, i in enumerate(rows):
            out[i] = log_probs[b, lead_frames : int(enc_lens[b])]
    return out


def translation_probe(
    model, tokenizer, utts: Sequence[Utterance], offset_s: float, lead_in: torch.Tensor | None = None,
    chunk_size: int = CHUNK, left_chunks: int = LEFT, features=None,
) -> ModeResult:
    """CTC greedy WER of ``utts`` streamed with the clock at ``offset_s`` seconds (module docstring):
    per-utterance records and totals, as ``asr.evaluation.split`` gives for a decoding mode.
    ``features``: the model's fbank options for the default lead-in (None: LEGACY)."""
    if not utts:
        raise ValueError("no utterances for the translation probe")
    lead_in = lead_in_features(features) if lead_in is None else lead_in
    period = FRAME_SHIFT_S * model.encoder.subsampling_rate
    start_time = round(offset_s / period)
    log_probs = shifted_log_probs(model, [u.feats for u in utts], start_time, lead_in, chunk_size, left_chunks)
    result = greedy_result(model, tokenizer, utts, log_probs)
    result.totals.update(offset_s=offset_s, start_time=start_time)
    return result


def greedy_result(model, tokenizer, utts: Sequence[Utterance], log_probs: Sequence[torch.Tensor]) -> ModeResult:
    """CTC greedy hypotheses of per-utterance (T'_i, V) ``log_probs``, scored against ``utts``' references:
    per-utterance records and totals, as ``asr.evaluation.split`` gives for a decoding mode."""
    counter = ErrorCounter()
    for utt, lp in zip(utts, log_probs):
        (hyp,) = ctc_greedy(lp[None], torch.tensor([lp.size(0)]), model.blank_id)
        counter.add(utt.text, tokenizer.decode(hyp), key=utt.key, seconds=utt.seconds)
    return ModeResult(counter.records, counter.summary())
