"""Evaluation pieces on a tiny untrained model: batching, WER, streaming RTF, per-metric failures."""

import json
from pathlib import Path

import pytest
import torch

from asr.ablation.evaluate import Utterance, _measure, batches, pad_feats, streaming_rtf, error_rates
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


def test_batches_respect_the_audio_bound_and_keep_every_utterance() -> None:
    utts = _utts([3.0, 1.0, 2.0, 9.0, 0.5])
    groups = list(batches(utts, batch_seconds=4.0))
    assert sorted(u.key for g in groups for u in g) == sorted(u.key for u in utts)
    assert all(sum(u.seconds for u in g) <= 4.0 or len(g) == 1 for g in groups)
    assert [u.seconds for u in groups[0]] == [0.5, 1.0, 2.0]  # shortest first
    feats, lens = pad_feats(groups[0])
    assert feats.shape == (3, 200, 80) and lens.tolist() == [50, 100, 200]
    assert torch.all(feats[0, 50:] == 0)


def test_wer_in_percent_with_records(tmp_path: Path) -> None:
    model, utts = _model(), _utts([1.0, 1.5])
    records = tmp_path / "rows.jsonl"
    wer, cer = error_rates(model, CharTok(), utts, "ctc_greedy", 4, 2, records_path=records)
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    assert {r["key"] for r in rows} == {"u0", "u1"}
    expected = 100.0 * sum(r["word_errors"] for r in rows) / sum(r["ref_words"] for r in rows)
    assert wer == pytest.approx(expected) and wer > 0  # an untrained model is wrong
    chars = 100.0 * sum(r["char_errors"] for r in rows) / sum(r["ref_chars"] for r in rows)
    assert cer == pytest.approx(chars)
    with pytest.raises(ValueError, match="no utterances"):
        error_rates(model, CharTok(), [], "ctc_greedy", 0, -1)


def test_streaming_rtf_is_positive_and_restores_threads() -> None:
    threads = torch.get_num_threads()
    rtf = streaming_rtf(_model("shaw", max_distance=4), _utts([1.3, 0.7]), chunk_size=4, left_chunks=2)
    assert 0 < rtf < 50
    assert torch.get_num_threads() == threads


def test_a_failing_measurement_becomes_none_with_its_error() -> None:
    model = _model("abs_learned", max_len=8)  # 8 encoder frames = 0.32 s
    errors: dict[str, str] = {}
    value = _measure("wer_long", errors, lambda: error_rates(model, CharTok(), _utts([2.0]), "ctc_greedy", 0, -1))
    assert value is None and "8" in errors["wer_long"]
    assert _measure("x", errors, lambda: (1.5, 2.0)) == (1.5, 2.0) and "x" not in errors
    assert _measure("y", errors, lambda: 1.5, split_error="FileNotFoundError: long") is None
    assert errors["y"] == "FileNotFoundError: long"
