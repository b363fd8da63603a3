"""Decode a cut set and score it: the one split-level evaluation.

``scripts/decode.py``, the ablation (``asr.ablation.evaluate``) and, through
decode.py, the quickstart all score WER this way, so their numbers agree:

1. :func:`load_utterances` reads fbank features and reference text of the cuts
   in manifest order, skipping (and counting by reason) what cannot be scored;
2. :func:`evaluate_utterances` decodes them in duration-sorted batches with
   :func:`asr.decode.decode_batch`, once per mode, and scores every utterance.

Axis legend: B batch, T feature frames, F feature bins.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from asr.decode.batch import FUSED_MODES, MODES, decode_batch
from asr.decode.wer import ErrorCounter
from asr.lm.fusion import Fusion


@dataclass(frozen=True)
class Utterance:
    """One cut ready to decode: ``feats`` (T, F), its reference ``text`` and audio ``seconds``."""

    key: str
    text: str
    feats: torch.Tensor
    seconds: float


@dataclass
class EvalSet:
    """The utterances of a cut set, in manifest order, and the cuts skipped on the way (reason -> count)."""

    utterances: list[Utterance]
    skipped: Counter = field(default_factory=Counter)


def usable_cuts(cuts_path: str | Path, data_dir: str | Path | None = None, max_utts: int | None = None,
                skipped: Counter | None = None, min_samples: int | None = None,
                ) -> Iterator[tuple[object, str, torch.Tensor]]:
    """(cut, reference text, audio (n,) at SAMPLE_RATE) of the first ``max_utts`` usable cuts (None: all).

    A cut is skipped and counted in ``skipped``, never fatal, when its text is empty
    (``empty_text``), its audio cannot be read (the ``AudioError`` reason:
    ``audio_missing``, ``audio_corrupt``, ...) or is shorter than one fbank frame
    (``audio_too_short``: under ``min_samples``, default one legacy window); the reasons are
    those the training data loader counts.
    Any other exception is a bug and propagates. Relative audio paths resolve
    against ``data_dir`` (default: the manifest's folder).
    """
    from asr.data.audio import AudioError, cut_waveform
    from asr.data.dataset import cut_text
    from asr.data.features import SAMPLE_RATE, FbankExtractor
    from asr.data.manifest import read_cuts

    if max_utts is not None and max_utts < 1:
        raise ValueError(f"max_utts ({max_utts}) must be >= 1 or None")
    skipped = skipped if skipped is not None else Counter()
    min_samples = FbankExtractor().min_samples if min_samples is None else min_samples
    used = 0
    for cut in read_cuts(cuts_path, data_dir):
        if max_utts is not None and used >= max_utts:
            return
        text = cut_text(cut)
        if not text:
            skipped["empty_text"] += 1
            continue
        try:
            audio = cut_waveform(cut, SAMPLE_RATE)  # (n,)
        except AudioError as err:
            skipped[err.reason] += 1
            continue
        if audio.numel() < min_samples:
            skipped["audio_too_short"] += 1
            continue
        used += 1
        yield cut, text, audio


def load_utterances(cuts_path: str | Path, data_dir: str | Path | None = None,
                    max_utts: int | None = None, features=None) -> EvalSet:
    """Features and references of the first ``max_utts`` usable cuts of a manifest (None: all);
    the skip rules are :func:`usable_cuts`'s. ``features``: the model's fbank options
    (``asr.data.features.FeatureConfig``, from its checkpoint; None: LEGACY)."""
    from asr.data.features import SAMPLE_RATE, FbankExtractor

    extractor = FbankExtractor(features)
    skipped: Counter = Counter()
    utts = [Utterance(cut.id, text, extractor(audio), audio.numel() / SAMPLE_RATE)
            for cut, text, audio in usable_cuts(cuts_path, data_dir, max_utts, skipped, extractor.min_samples)]
    return EvalSet(utts, skipped)


def duration_batches(seconds: Sequence[float], batch_seconds: float) -> Iterator[list[int]]:
    """Indices into ``seconds`` grouped shortest first (less padding): each group holds at most
    ``batch_seconds`` of audio, or one utterance longer than that."""
    if batch_seconds <= 0:
        raise ValueError(f"batch_seconds ({batch_seconds}) must be > 0")
    batch: list[int] = []
    total = 0.0
    for i in sorted(range(len(seconds)), key=seconds.__getitem__):
        if batch and total + seconds[i] > batch_seconds:
            yield batch
            batch, total = [], 0.0
        batch.append(i)
        total += seconds[i]
    if batch:
        yield batch


@dataclass
class ModeResult:
    """One decoding mode over an :class:`EvalSet`.

    ``records``: one dict per utterance in manifest order (key, ref, hyp,
    word_errors, ref_words, char_errors, ref_chars, seconds); ``totals``: utterances,
    error and reference counts, wer, cer (fractions), decode_seconds (wall clock
    of ``decode_batch``, encoder included) and rtf (decode_seconds / audio seconds).
    """

    records: list[dict]
    totals: dict


@dataclass
class SplitResult:
    """Every requested mode over one :class:`EvalSet` with one decoding setting."""

    modes: dict[str, ModeResult]
    settings: dict
    audio_seconds: float
    skipped: Counter

    def summary(self) -> dict:
        """JSON-ready totals: settings, audio seconds, skipped cuts by reason and each mode's totals."""
        return {
            **self.settings,
            "audio_seconds": self.audio_seconds,
            "skipped_utterances": dict(sorted(self.skipped.items())),
            "modes": {mode: result.totals for mode, result in self.modes.items()},
        }


@torch.inference_mode()
def evaluate_utterances(
    model,
    tokenizer,
    eval_set: EvalSet,
    modes: Sequence[str],
    chunk_size: int = 0,
    left_chunks: int = -1,
    beam: int = 10,
    ctc_weight: float = 0.5,
    reverse_weight: float = 0.0,
    batch_seconds: float = 100.0,
    progress: bool = False,
    fusion: Fusion | None = None,
) -> SplitResult:
    """Decode ``eval_set`` with every mode of ``modes`` and score it.

    Args:
        model: an ``AsrModel`` in eval mode; tokenizer: ``decode(ids) -> str``.
        modes: a subset of :data:`asr.decode.MODES`.
        chunk_size, left_chunks, beam, ctc_weight, reverse_weight: as in ``decode_batch``.
        batch_seconds: audio per decoding batch (a longer utterance is decoded alone).
        fusion: the language models (token, word or both) for the modes that take them (``FUSED_MODES``);
            the other modes decode without it, so a greedy row stays the acoustic baseline.
        progress: show a progress bar over the batches.

    A decoding error (e.g. an input longer than ``abs_learned``'s table) propagates:
    a WER over the utterances that happened to decode would not be comparable with
    one over the whole set. The ablation catches it per measurement.
    """
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise ValueError(f"modes ({list(modes)}) must be a non-empty subset of {', '.join(MODES)}.")
    utts = eval_set.utterances
    if not utts:
        raise ValueError(f"no utterances to decode (skipped: {dict(eval_set.skipped) or 'none'})")
    hyps = {m: [""] * len(utts) for m in modes}  # manifest order, whatever the batching
    seconds = dict.fromkeys(modes, 0.0)
    batches = duration_batches([u.seconds for u in utts], batch_seconds)
    if progress:
        from tqdm import tqdm

        batches = tqdm(list(batches), desc="decoding", unit="batch")
    for batch in batches:
        feats = torch.nn.utils.rnn.pad_sequence([utts[i].feats for i in batch], batch_first=True)  # (B, T, F)
        lens = torch.tensor([utts[i].feats.size(0) for i in batch])  # (B,)
        for mode in modes:
            start = time.perf_counter()
            ids = decode_batch(model, feats, lens, mode, beam=beam, chunk_size=chunk_size, left_chunks=left_chunks,
                               ctc_weight=ctc_weight, reverse_weight=reverse_weight,
                               fusion=fusion if mode in FUSED_MODES else None)
            seconds[mode] += time.perf_counter() - start
            for i, hyp in zip(batch, ids):
                hyps[mode][i] = tokenizer.decode(hyp)
    audio_s = sum(u.seconds for u in utts)
    results = {}
    for mode in modes:
        counter = ErrorCounter()
        for utt, hyp in zip(utts, hyps[mode]):
            counter.add(utt.text, hyp, key=utt.key, seconds=utt.seconds)
        totals = {**counter.summary(), "decode_seconds": seconds[mode], "rtf": seconds[mode] / audio_s}
        results[mode] = ModeResult(counter.records, totals)
    settings = {"chunk_size": chunk_size, "left_chunks": left_chunks, "beam": beam, "ctc_weight": ctc_weight,
                "reverse_weight": reverse_weight,
                "lm": None if fusion is None else fusion.settings()}
    return SplitResult(results, settings, audio_s, Counter(eval_set.skipped))
