"""Evaluate one trained checkpoint for the ablation table.

Measures, each independently (one failing measurement leaves ``None`` and its
error line, the others still run):

- parameter count;
- test WER full context: attention rescoring and CTC greedy;
- test WER streaming (chunk mask, CTC greedy) at C16/L4 and C4/L16: the same
  64-frame memory with a coarser and a finer latency;
- long-split WER (length extrapolation) full context and C16/L4;
- streaming RTF: ``enc.stream_step`` + CTC greedy over test audio fed one chunk
  at a time, on one CPU thread.

The chunk-masked forward is what ``stream_step`` computes exactly (the encoder's
streaming contract), so streaming WERs use the batched masked forward.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from asr.ablation.results import last_line
from asr.decode import ErrorCounter, ctc_greedy, decode_batch

# column key -> (decoding mode, split, chunk_size, left_chunks)
WER_SETTINGS: dict[str, tuple[str, str, int, int]] = {
    "wer_test_rescore": ("attention_rescoring", "test", 0, -1),
    "wer_test_greedy": ("ctc_greedy", "test", 0, -1),
    "wer_stream_c16": ("ctc_greedy", "test", 16, 4),
    "wer_stream_c4": ("ctc_greedy", "test", 4, 16),
    "wer_long": ("ctc_greedy", "long", 0, -1),
    "wer_long_stream": ("ctc_greedy", "long", 16, 4),
}
# WER columns whose CER is reported too (CER still moves when short budgets leave WER near 100 %).
CER_OF: dict[str, str] = {"wer_test_greedy": "cer_test_greedy"}
RTF_CHUNK, RTF_LEFT = 16, 4


@dataclass
class EvalConfig:
    """Where the evaluation data is and how much of it to use.

    ``max_utts`` / ``max_long_utts`` keep the first N cuts of a split (manifest
    order, deterministic); None keeps all. ``batch_seconds`` bounds the audio in
    one decoding batch; ``rtf_utts`` is how many test utterances the RTF streams.
    """

    data_dir: str
    test_cuts: str = "cuts_test.jsonl.gz"
    long_cuts: str = "cuts_long.jsonl.gz"
    max_utts: int | None = None
    max_long_utts: int | None = None
    beam: int = 10
    batch_seconds: float = 120.0
    rtf_utts: int = 10

    def __post_init__(self) -> None:
        for name in ("max_utts", "max_long_utts"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1 or None, got {value}")
        if self.batch_seconds <= 0:
            raise ValueError(f"batch_seconds must be > 0, got {self.batch_seconds}")

    def split_file(self, split: str) -> tuple[Path, int | None]:
        if split == "test":
            return Path(self.data_dir) / self.test_cuts, self.max_utts
        if split == "long":
            return Path(self.data_dir) / self.long_cuts, self.max_long_utts
        raise ValueError(f"unknown split {split!r}; valid: test, long")


@dataclass
class Utterance:
    key: str
    text: str
    feats: torch.Tensor  # (T, F)
    seconds: float


def load_split(
    cuts_path: Path, data_dir: str, max_utts: int | None = None
) -> tuple[list[Utterance], Counter]:
    """Features and references of a split's first ``max_utts`` cuts.

    Unreadable audio, empty text or audio too short for one frame is skipped and
    counted by reason (the returned Counter), never fatal.
    """
    from asr.data.audio import AudioError, cut_waveform
    from asr.data.features import FbankExtractor
    from asr.data.manifest import read_cuts

    extractor = FbankExtractor()
    cuts = read_cuts(cuts_path, data_dir)
    utts: list[Utterance] = []
    skipped: Counter = Counter()
    for cut in cuts:
        if max_utts is not None and len(utts) >= max_utts:
            break
        text = " ".join(s.text or "" for s in cut.supervisions).strip()
        if not text:
            skipped["empty text"] += 1
            continue
        try:
            audio = cut_waveform(cut)
        except (AudioError, ValueError, OSError) as err:
            skipped[f"audio: {type(err).__name__}"] += 1
            continue
        if audio.numel() < extractor.min_samples:
            skipped["too short"] += 1
            continue
        utts.append(Utterance(cut.id, text, extractor(audio), audio.numel() / 16000.0))
    return utts, skipped


def batches(utts: Sequence[Utterance], batch_seconds: float) -> Iterator[list[Utterance]]:
    """Duration-sorted batches (less padding) holding at most ``batch_seconds`` of audio (>= 1 utt)."""
    ordered = sorted(utts, key=lambda u: u.seconds)
    batch: list[Utterance] = []
    total = 0.0
    for utt in ordered:
        if batch and total + utt.seconds > batch_seconds:
            yield batch
            batch, total = [], 0.0
        batch.append(utt)
        total += utt.seconds
    if batch:
        yield batch


def pad_feats(batch: Sequence[Utterance]) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T_max, F) zero-padded features and (B,) lengths."""
    lens = torch.tensor([u.feats.size(0) for u in batch], dtype=torch.long)
    feats = torch.nn.utils.rnn.pad_sequence([u.feats for u in batch], batch_first=True)  # (B, T, F)
    return feats, lens


@torch.no_grad()
def error_rates(
    model, tokenizer, utts: Sequence[Utterance], mode: str, chunk_size: int, left_chunks: int,
    beam: int = 10, batch_seconds: float = 120.0, records_path: Path | None = None,
) -> tuple[float, float]:
    """(WER, CER) in percent of ``utts`` decoded with ``decode_batch``; per-utterance rows to ``records_path``."""
    if not utts:
        raise ValueError("no utterances to score (all skipped or split empty)")
    counter = ErrorCounter()
    for batch in batches(utts, batch_seconds):
        feats, lens = pad_feats(batch)
        hyps = decode_batch(model, feats, lens, mode, beam=beam, chunk_size=chunk_size, left_chunks=left_chunks)
        for utt, hyp in zip(batch, hyps):
            counter.add(utt.text, tokenizer.decode(hyp), key=utt.key)
    if records_path is not None:
        records_path.parent.mkdir(parents=True, exist_ok=True)
        records_path.write_text("".join(json.dumps(r) + "\n" for r in counter.records))
    return 100.0 * counter.wer, 100.0 * counter.cer


@torch.no_grad()
def streaming_rtf(model, utts: Sequence[Utterance], chunk_size: int, left_chunks: int) -> float:
    """Real-time factor of chunk-by-chunk encoding + CTC greedy on one thread.

    Each utterance's features are fed ``chunk_size * subsampling_rate`` frames at a
    time (one encoder chunk per call, as a live stream would); the time of
    ``stream_step``, the CTC projection and the greedy step is summed and divided
    by the audio duration.
    """
    if not utts:
        raise ValueError("no utterances for the RTF measurement")
    enc = model.encoder
    piece = chunk_size * enc.subsampling_rate
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        busy = 0.0
        for utt in utts:
            feats = utt.feats.unsqueeze(0)  # (1, T, F)
            start = time.perf_counter()
            state = enc.init_state(1, chunk_size, left_chunks)
            for begin in range(0, feats.size(1), piece):
                final = begin + piece >= feats.size(1)
                out, state = enc.stream_step(feats[:, begin : begin + piece], state, final=final)  # (1, n', D)
                if out.size(1) > 0:
                    ctc_greedy(model.ctc_log_probs(out), torch.tensor([out.size(1)]), model.blank_id)
            busy += time.perf_counter() - start
    finally:
        torch.set_num_threads(threads)
    return busy / sum(u.seconds for u in utts)


def evaluate_checkpoint(ckpt: Path, cfg: EvalConfig, out_dir: Path | None = None, log=print) -> tuple[dict, dict]:
    """All measurements of one checkpoint: ``(metrics, metric_errors)``.

    ``out_dir`` receives per-utterance decoding rows (``decode_<metric>.jsonl``).
    Raises only when the checkpoint itself cannot be loaded.
    """
    from asr.train.checkpoint import load_model, read_checkpoint

    model, tokenizer, _ = load_model(ckpt)
    model.eval()
    metrics: dict[str, float | None] = {
        "params_m": sum(p.numel() for p in model.parameters()) / 1e6,
        # The steps behind the evaluated weights (a time-budget stop can end past the last save).
        "train_steps": float(read_checkpoint(ckpt)["global_step"]),
    }
    errors: dict[str, str] = {}
    splits: dict[str, list[Utterance]] = {}
    for split in sorted({s for _, s, _, _ in WER_SETTINGS.values()}):
        path, limit = cfg.split_file(split)
        try:
            splits[split], skipped = load_split(path, cfg.data_dir, limit)
            if skipped:
                log(f"[ablate]   {split}: skipped {dict(skipped)}")
        except Exception as err:  # noqa: BLE001  (a missing split costs its columns only)
            splits[split] = []
            errors[f"split:{split}"] = last_line(err)
    for key, (mode, split, chunk, left) in WER_SETTINGS.items():
        records = out_dir / f"decode_{key}.jsonl" if out_dir is not None else None
        start = time.perf_counter()
        rates = _measure(
            key, errors, lambda: error_rates(
                model, tokenizer, splits[split], mode, chunk, left, cfg.beam, cfg.batch_seconds, records
            ), split_error=errors.get(f"split:{split}"),
        )
        metrics[key] = None if rates is None else rates[0]
        if key in CER_OF:
            metrics[CER_OF[key]] = None if rates is None else rates[1]
            if rates is None:
                errors[CER_OF[key]] = errors[key]
        shown = "n/a" if rates is None else f"{rates[0]:.2f}"
        log(f"[ablate]   {key} = {shown} ({len(splits[split])} utts, {time.perf_counter() - start:.0f} s)")
    rtf = _measure(
        "stream_rtf", errors, lambda: streaming_rtf(model, splits["test"][: cfg.rtf_utts], RTF_CHUNK, RTF_LEFT),
        split_error=errors.get("split:test"),
    )
    metrics["stream_rtf"] = None if rtf is None else float(rtf)
    return metrics, {k: v for k, v in errors.items() if not k.startswith("split:")}


def _measure(key: str, errors: dict[str, str], fn, split_error: str | None = None):
    """``fn()``, or None with ``errors[key]`` set when it raises (or its split failed to load)."""
    if split_error is not None:
        errors[key] = split_error
        return None
    try:
        return fn()
    except Exception as err:  # noqa: BLE001  (e.g. abs_learned past its table on the long split)
        errors[key] = last_line(err)
        return None
