"""Ablation-only evaluation pieces on a tiny untrained model: streaming RTF, per-metric failures.

Batching and WER scoring are the shared ``asr.evaluation.split`` (tests/evaluation/test_split_evaluation.py).
"""

import numpy as np
import soundfile as sf
import torch

from asr.ablation.evaluate import NOT_APPLICABLE, EvalConfig, _measure, load_splits, streaming_rtf
from asr.data.features import SAMPLE_RATE
from asr.data.importers import make_cut, make_recording
from asr.data.manifest import write_cuts
from asr.evaluation.split import EvalSet, Utterance, evaluate_utterances
from asr.synth.probes import PROBE_FILE, PROBE_LENGTHS, probe_id
from asr.model.asr_model import build_asr_model


class CharTok:
    """ids 1..26 = a..z, 27 = space; decode only (what the evaluator needs)."""

    def decode(self, ids):
        return "".join(" " if i == 27 else chr(ord("a") + i - 1) for i in ids if 1 <= i <= 27)


def _model(pos_enc: str = "rel_xl", **scheme) -> torch.nn.Module:
    torch.manual_seed(0)
    enc = dict(pos_enc=pos_enc, input_dim=80, d_model=32, num_heads=2, num_layers=1, ffn_dim=64,
               conv_kernel=3, causal=True, subsampling=4, dropout=0.0, **scheme)
    model = build_asr_model(vocab_size=29, sos_eos_id=28, encoder_kwargs=enc, decoder_layers=1,
                            decoder_heads=2, decoder_ffn_dim=64)
    return model.eval()


def _utts(seconds: list[float]) -> list[Utterance]:
    gen = torch.Generator().manual_seed(1)
    return [
        Utterance(f"u{i}", "the cat sat", torch.randn(int(s * 100), 80, generator=gen), s)
        for i, s in enumerate(seconds)
    ]


def test_streaming_rtf_is_positive_and_restores_threads() -> None:
    threads = torch.get_num_threads()
    rtf = streaming_rtf(_model("shaw", max_distance=4), _utts([1.3, 0.7]), chunk_size=4, left_chunks=2)
    assert 0 < rtf < 50
    assert torch.get_num_threads() == threads


def test_a_failing_measurement_becomes_none_with_its_error() -> None:
    errors: dict[str, str] = {}
    assert _measure("x", errors, lambda: (1.5, 2.0)) == (1.5, 2.0) and "x" not in errors
    assert _measure("y", errors, lambda: 1.5, split_error="FileNotFoundError: probe") is None
    assert errors["y"] == "FileNotFoundError: probe"

    def broken():
        raise ValueError("shapes do not match")

    assert _measure("z", errors, broken) is None and errors["z"] == "ValueError: shapes do not match"


def test_input_past_a_learned_table_is_not_applicable_not_a_failure() -> None:
    model = _model("abs_learned", max_len=8)  # 8 encoder frames = 0.32 s
    errors: dict[str, str] = {}
    value = _measure("wer_probe160_full", errors,
                     lambda: evaluate_utterances(model, CharTok(), EvalSet(_utts([2.0])), ["ctc_greedy"]))
    assert value is None and errors["wer_probe160_full"].startswith(NOT_APPLICABLE)
    assert "max_len=8" in errors["wer_probe160_full"]
    # The same scheme runs what fits its table.
    short = _measure("wer_probe5_full", errors,
                     lambda: evaluate_utterances(model, CharTok(), EvalSet(_utts([0.25])), ["ctc_greedy"]))
    assert short is not None and "wer_probe5_full" not in errors


def _write_manifest(root, ids: list[str], path) -> None:
    rng = np.random.default_rng(0)
    cuts = []
    for cut_id in ids:
        wav = root / f"{cut_id}.wav"
        sf.write(wav, (0.1 * rng.standard_normal(SAMPLE_RATE // 2)).astype(np.float32), SAMPLE_RATE)
        cuts.append(make_cut(cut_id, make_recording(cut_id, wav), "the cat"))
    write_cuts(cuts, path)


def test_load_splits_groups_probes_by_target_length(tmp_path) -> None:
    _write_manifest(tmp_path, ["t0", "t1", "t2"], tmp_path / "cuts_test.jsonl.gz")
    ids = [probe_id(5, 0), probe_id(5, 1), probe_id(10, 0)]
    _write_manifest(tmp_path, [*ids, "stray-cut"], tmp_path / PROBE_FILE)
    sets, data, split_errors = load_splits(EvalConfig(data_dir=str(tmp_path), max_utts=2), log=lambda _: None)
    assert [u.key for u in sets["test"].utterances] == ["t0", "t1"]
    assert [u.key for u in sets["probe5"].utterances] == ids[:2]
    assert [u.key for u in sets["probe10"].utterances] == ids[2:]
    assert data["probe"]["per_length"] == {"5": 2, "10": 1} and data["test"]["max_utts"] == 2
    # A cut the probe builder did not write is counted, not assigned a length.
    assert data["probe"]["skipped"] == {"not_a_probe_id": 1} and data["probe"]["utterances"] == 3
    missing = [s for s in PROBE_LENGTHS if s not in (5, 10)]
    assert sorted(k for k in split_errors) == sorted(f"probe{s}" for s in missing)
    assert "no 160 s probes" in split_errors["probe160"]


def test_load_splits_without_a_probe_set_fails_only_the_probe_columns(tmp_path) -> None:
    _write_manifest(tmp_path, ["t0"], tmp_path / "cuts_test.jsonl.gz")
    sets, data, split_errors = load_splits(EvalConfig(data_dir=str(tmp_path)), log=lambda _: None)
    assert len(sets["test"].utterances) == 1 and "test" not in split_errors
    assert "error" in data["probe"] and set(split_errors) == {f"probe{s}" for s in PROBE_LENGTHS}
    assert all(split_errors[f"probe{s}"] == data["probe"]["error"] for s in PROBE_LENGTHS)
