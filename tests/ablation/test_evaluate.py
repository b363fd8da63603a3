"""Ablation-only evaluation pieces on a tiny untrained model: streaming RTF, per-metric failures.

Batching and WER scoring are the shared ``asr.decode.evaluate`` (tests/decode/test_evaluate.py).
"""

import pytest
import torch

from asr.ablation.evaluate import _measure, streaming_rtf
from asr.decode.evaluate import EvalSet, Utterance, evaluate_utterances
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
    model = _model("abs_learned", max_len=8)  # 8 encoder frames = 0.32 s
    errors: dict[str, str] = {}
    value = _measure("wer_long", errors,
                     lambda: evaluate_utterances(model, CharTok(), EvalSet(_utts([2.0])), ["ctc_greedy"]))
    assert value is None and "max_len=8" in errors["wer_long"]
    assert _measure("x", errors, lambda: (1.5, 2.0)) == (1.5, 2.0) and "x" not in errors
    assert _measure("y", errors, lambda: 1.5, split_error="FileNotFoundError: long") is None
    assert errors["y"] == "FileNotFoundError: long"
