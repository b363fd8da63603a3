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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from asr.ablation.results import last_line
from asr.decode import ctc_greedy
from asr.decode.evaluate import EvalSet, Utterance, evaluate_utterances, load_utterances

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

    ``max_utts`` / ``max_long_utts`` keep the first N usable cuts of a split
    (manifest order, deterministic; skipped cuts do not count); None keeps all. ``batch_seconds`` bounds the audio in
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


def evaluate_checkpoint(
    ckpt: Path, cfg: EvalConfig, out_dir: Path | None = None, log=print
) -> tuple[dict, dict, dict]:
    """All measurements of one checkpoint: ``(metrics, metric_errors, eval_data)``.

    ``eval_data`` says what each split contributed: ``{split: {cuts, max_utts,
    utterances, skipped: {reason: count}}}`` (or ``error`` when the split could not
    be read). ``out_dir`` receives per-utterance decoding rows (``decode_<metric>.jsonl``).
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
    splits: dict[str, EvalSet] = {}
    eval_data: dict[str, dict] = {}
    for split in sorted({s for _, s, _, _ in WER_SETTINGS.values()}):
        path, limit = cfg.split_file(split)
        eval_data[split] = {"cuts": path.name, "max_utts": limit}
        try:
            splits[split] = load_utterances(path, cfg.data_dir, limit)
        except Exception as err:  # noqa: BLE001  (a missing split costs its columns only)
            splits[split] = EvalSet([])
            errors[f"split:{split}"] = eval_data[split]["error"] = last_line(err)
            continue
        skipped = dict(sorted(splits[split].skipped.items()))
        eval_data[split].update(utterances=len(splits[split].utterances), skipped=skipped)
        if skipped:
            log(f"[ablate]   {split}: skipped {skipped}")
    for key, (mode, split, chunk, left) in WER_SETTINGS.items():
        start = time.perf_counter()
        result = _measure(
            key, errors, lambda: evaluate_utterances(
                model, tokenizer, splits[split], [mode], chunk, left, beam=cfg.beam, batch_seconds=cfg.batch_seconds,
            ).modes[mode], split_error=errors.get(f"split:{split}"),
        )
        metrics[key] = None if result is None else 100.0 * result.totals["wer"]
        if key in CER_OF:
            metrics[CER_OF[key]] = None if result is None else 100.0 * result.totals["cer"]
            if result is None:
                errors[CER_OF[key]] = errors[key]
        if result is not None and out_dir is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
            (out_dir / f"decode_{key}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in result.records))
        shown = "n/a" if result is None else f"{metrics[key]:.2f}"
        log(f"[ablate]   {key} = {shown} ({len(splits[split].utterances)} utts, {time.perf_counter() - start:.0f} s)")
    rtf = _measure(
        "stream_rtf", errors,
        lambda: streaming_rtf(model, splits["test"].utterances[: cfg.rtf_utts], RTF_CHUNK, RTF_LEFT),
        split_error=errors.get("split:test"),
    )
    metrics["stream_rtf"] = None if rtf is None else float(rtf)
    return metrics, {k: v for k, v in errors.items() if not k.startswith("split:")}, eval_data


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
