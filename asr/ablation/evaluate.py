"""Evaluate one trained checkpoint for the ablation table.

Measures, each independently (one failing measurement leaves ``None`` and its
error line, the others still run):

- parameter count;
- test WER full context: attention rescoring and CTC greedy;
- the streaming trade-off: test WER (CTC greedy) with chunk masks of 32, 16, 8 and
  4 frames, each with the same 64-frame memory (left chunks 2, 4, 8, 16);
- length extrapolation: WER (CTC greedy) on the probe set (``asr.synth.probes``:
  20 passages by test voices at each of 5, 10, 20, 40, 80 and 160 s), full context
  and at C16/L4; a scheme whose learned table is shorter than a probe gets
  "n/a: longer than its table" for that length, not a failed run;
- streaming RTF: ``enc.stream_step`` + CTC greedy over test audio fed one chunk
  at a time, on one CPU thread;
- the translation probe (``asr.ablation.translation``): CTC greedy WER of the first
  ``translation_utts`` test utterances streamed at C16/L4 after a silent lead-in, with the
  stream clock at 0 s, 60 s and 600 s; relative schemes score the same at every offset.

Every WER measurement writes its per-utterance records (``decode_<key>.jsonl``)
for the bootstrap intervals of the report. The chunk-masked forward is what
``stream_step`` computes exactly (the encoder's streaming contract), so streaming
WERs use the batched masked forward.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from asr.ablation.results import last_line, write_jsonl
from asr.ablation.translation import OFFSETS_S, translation_probe
from asr.decode import ctc_greedy
from asr.evaluation.split import EvalSet, Utterance, evaluate_utterances, load_utterances
from asr.synth.probes import PROBE_FILE, PROBE_LENGTHS, probe_target
from asr.model.positions import TooLongForTable
from asr.decode.options import DEFAULT_BEAM

# Chunk sizes of the streaming trade-off with their left chunks: every setting keeps
# 64 frames of memory, so the sweep varies latency (chunk x frame period), not context.
CHUNK_SWEEP: tuple[tuple[int, int], ...] = ((32, 2), (16, 4), (8, 8), (4, 16))
# Contexts of the length curve: full, and the streaming setting of the runtime.
PROBE_CONTEXTS: dict[str, tuple[int, int]] = {"full": (0, -1), "c16": (16, 4)}
NOT_APPLICABLE = "n/a: longer than its table"

# column key -> (decoding mode, split, chunk_size, left_chunks); split "probe<S>" is the
# probe set's S-second passages.
WER_SETTINGS: dict[str, tuple[str, str, int, int]] = {
    "wer_test_rescore": ("attention_rescoring", "test", 0, -1),
    "wer_test_greedy": ("ctc_greedy", "test", 0, -1),
    **{f"wer_chunk{c}": ("ctc_greedy", "test", c, left) for c, left in CHUNK_SWEEP},
    **{
        f"wer_probe{seconds}_{name}": ("ctc_greedy", f"probe{seconds}", c, left)
        for seconds in PROBE_LENGTHS
        for name, (c, left) in PROBE_CONTEXTS.items()
    },
}
# Translation probe: column key -> stream clock offset in seconds.
TRANSLATION_METRICS: dict[str, int] = {f"wer_shift{s}": s for s in OFFSETS_S}
# Every WER measurement with per-utterance records (what the report's statistics read).
ALL_WER_METRICS: tuple[str, ...] = (*WER_SETTINGS, *TRANSLATION_METRICS)
# WER columns whose CER is reported too (CER still moves when short budgets leave WER near 100 %).
CER_OF: dict[str, str] = {"wer_test_greedy": "cer_test_greedy"}
RTF_CHUNK, RTF_LEFT = 16, 4


@dataclass
class EvalConfig:
    """Where the evaluation data is and how much of it to use.

    ``max_utts`` keeps the first N usable test cuts (manifest order, deterministic;
    skipped cuts do not count); None keeps all. The probe set is always used whole.
    ``batch_seconds`` bounds the audio in one decoding batch; ``rtf_utts`` is how
    many test utterances the RTF streams, ``translation_utts`` how many (the first ones) the
    translation probe decodes at each offset.
    """

    data_dir: str
    test_cuts: str = "cuts_test.jsonl.gz"
    probe_cuts: str = PROBE_FILE
    max_utts: int | None = None
    beam: int = DEFAULT_BEAM
    batch_seconds: float = 120.0
    rtf_utts: int = 10
    translation_utts: int = 200

    def __post_init__(self) -> None:
        if self.max_utts is not None and self.max_utts < 1:
            raise ValueError(f"max_utts must be >= 1 or None, got {self.max_utts}")
        if self.batch_seconds <= 0:
            raise ValueError(f"batch_seconds must be > 0, got {self.batch_seconds}")
        if self.translation_utts < 1:
            raise ValueError(f"translation_utts must be >= 1, got {self.translation_utts}")


def load_splits(cfg: EvalConfig, log=print, features=None) -> tuple[dict[str, EvalSet], dict[str, dict], dict[str, str]]:
    """The evaluation sets: ``test`` and ``probe<S>`` per probe length, as ``features`` (the model's
    ``FeatureConfig``; None: LEGACY) frames.

    Returns (sets, eval_data, split_errors): ``eval_data[name]`` says what a manifest
    gave (``cuts``, ``max_utts``, ``utterances``, ``skipped`` by reason, or ``error``);
    ``split_errors[split]`` is why a set could not be read (its measurements fail alone).
    """
    sets: dict[str, EvalSet] = {}
    eval_data: dict[str, dict] = {}
    split_errors: dict[str, str] = {}
    for name, file, limit in (("test", cfg.test_cuts, cfg.max_utts), ("probe", cfg.probe_cuts, None)):
        eval_data[name] = {"cuts": file, "max_utts": limit}
        try:
            loaded = load_utterances(Path(cfg.data_dir) / file, cfg.data_dir, limit, features)
        except Exception as err:  # noqa: BLE001  (a missing split costs its columns only)
            eval_data[name]["error"] = split_errors[name] = last_line(err)
            continue
        skipped = dict(sorted(loaded.skipped.items()))
        eval_data[name].update(utterances=len(loaded.utterances), skipped=skipped)
        if skipped:
            log(f"[ablate]   {name}: skipped {skipped}")
        if name == "test":
            sets["test"] = loaded
            continue
        by_length: dict[int, list[Utterance]] = {}
        unnamed = 0
        for utt in loaded.utterances:
            try:
                by_length.setdefault(probe_target(utt.key), []).append(utt)
            except ValueError:  # a cut the probe builder did not write: counted, not guessed
                unnamed += 1
        if unnamed:
            eval_data[name]["skipped"]["not_a_probe_id"] = unnamed
            eval_data[name]["utterances"] -= unnamed
            log(f"[ablate]   {name}: {unnamed} cuts without a probe id (probe<seconds>-<index>) skipped")
        eval_data[name]["per_length"] = {str(s): len(u) for s, u in sorted(by_length.items())}
        for seconds in PROBE_LENGTHS:
            sets[f"probe{seconds}"] = EvalSet(by_length.get(seconds, []))
    for seconds in PROBE_LENGTHS:
        if f"probe{seconds}" not in sets:
            split_errors[f"probe{seconds}"] = split_errors["probe"]
        elif not sets[f"probe{seconds}"].utterances:
            split_errors[f"probe{seconds}"] = f"no {seconds} s probes in {cfg.probe_cuts}"
    split_errors.pop("probe", None)  # measured per length: the lengths carry the error
    if "test" not in sets:
        sets["test"] = EvalSet([])
    return sets, eval_data, split_errors


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
        norm = enc.online_cmn()  # what a live frontend does to each piece (when the model was trained with it)
        for utt in utts:
            feats = utt.feats.unsqueeze(0)  # (1, T, F)
            start = time.perf_counter()
            state = enc.init_state(1, chunk_size, left_chunks)
            frontend = None if norm is None else norm.stream()
            for begin in range(0, feats.size(1), piece):
                final = begin + piece >= feats.size(1)
                new = feats[:, begin : begin + piece]
                if frontend is not None:
                    new = frontend.push(new)
                out, state = enc.stream_step(new, state, final=final)  # (1, n', D)
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

    ``eval_data`` says what each manifest contributed (see :func:`load_splits`). ``out_dir`` receives per-utterance decoding rows (``decode_<metric>.jsonl``).
    Raises only when the checkpoint itself cannot be loaded.
    """
    from asr.data.features import FeatureConfig
    from asr.train.checkpoint import load_model, read_checkpoint

    model, tokenizer, train_cfg = load_model(ckpt)
    model.eval()
    metrics: dict[str, float | None] = {
        "params_m": sum(p.numel() for p in model.parameters()) / 1e6,
        # The steps behind the evaluated weights (a time-budget stop can end past the last save).
        "train_steps": float(read_checkpoint(ckpt)["global_step"]),
    }
    features = FeatureConfig.from_dict(train_cfg.features)
    splits, eval_data, split_errors = load_splits(cfg, log, features)
    errors: dict[str, str] = {}
    shifted = splits["test"].utterances[: cfg.translation_utts]
    measurements = [
        (key, split, lambda m=mode, sp=split, c=chunk, lc=left: evaluate_utterances(
            model, tokenizer, splits[sp], [m], c, lc, beam=cfg.beam, batch_seconds=cfg.batch_seconds,
        ).modes[m], len(splits.get(split, EvalSet([])).utterances))
        for key, (mode, split, chunk, left) in WER_SETTINGS.items()
    ] + [
        (key, "test", lambda s=offset: translation_probe(model, tokenizer, shifted, s, features=features), len(shifted))
        for key, offset in TRANSLATION_METRICS.items()
    ]
    for key, split, measure, n_utts in measurements:
        start = time.perf_counter()
        result = _measure(key, errors, measure, split_error=split_errors.get(split))
        metrics[key] = None if result is None else 100.0 * result.totals["wer"]
        if key in CER_OF:
            metrics[CER_OF[key]] = None if result is None else 100.0 * result.totals["cer"]
            if result is None:
                errors[CER_OF[key]] = errors[key]
        if result is not None and out_dir is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
            write_jsonl(out_dir / f"decode_{key}.jsonl", result.records)
        shown = "n/a" if result is None else f"{metrics[key]:.2f}"
        log(f"[ablate]   {key} = {shown} ({n_utts} utts, {time.perf_counter() - start:.0f} s)")
    rtf = _measure(
        "stream_rtf", errors,
        lambda: streaming_rtf(model, splits["test"].utterances[: cfg.rtf_utts], RTF_CHUNK, RTF_LEFT),
        split_error=split_errors.get("test"),
    )
    metrics["stream_rtf"] = None if rtf is None else float(rtf)
    return metrics, errors, eval_data


def _measure(key: str, errors: dict[str, str], fn, split_error: str | None = None):
    """``fn()``, or None with ``errors[key]`` set when it raises (or its split failed to load)."""
    if split_error is not None:
        errors[key] = split_error
        return None
    try:
        return fn()
    except TooLongForTable as err:  # abs_learned on a probe past its table: a property, not a failure
        errors[key] = f"{NOT_APPLICABLE} ({last_line(err)})"
        return None
    except Exception as err:  # noqa: BLE001  (one broken measurement costs its column only)
        errors[key] = last_line(err)
        return None


def dev_records(ckpt: Path, data_dir: str, dev_cuts: str = "cuts_dev.jsonl.gz", max_utts: int | None = None,
                batch_seconds: float = 120.0) -> list[dict]:
    """Per-utterance CTC greedy records (full context) of a checkpoint on the dev split: what the adaptive
    budget's decisions read (``asr.ablation.adaptive``). Rows: ``key``, ``word_errors``, ``ref_words``, ..."""
    from asr.data.features import FeatureConfig
    from asr.train.checkpoint import load_model

    model, tokenizer, train_cfg = load_model(ckpt)
    model.eval()
    loaded = load_utterances(Path(data_dir) / dev_cuts, data_dir, max_utts, FeatureConfig.from_dict(train_cfg.features))
    if not loaded.utterances:
        raise ValueError(f"no usable utterances in {Path(data_dir) / dev_cuts} (skipped: {dict(loaded.skipped)})")
    result = evaluate_utterances(model, tokenizer, loaded, ["ctc_greedy"], 0, -1, batch_seconds=batch_seconds)
    return result.modes["ctc_greedy"].records
