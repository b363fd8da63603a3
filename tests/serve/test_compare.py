"""Backend comparison: the same waves through the multi-stream recognizer on eager and ONNX steps give the same
finals and a WER table."""

import pytest
import torch

from asr.data.features import SAMPLE_RATE
from asr.decode.options import DecodeOptions
from asr.serve.compare import compare_backends, decode_streams, format_table, recognizer_factory
from tests.serve.helpers import fitted_model, noise

pytest.importorskip("onnxruntime", reason="pip install -e '.[export]'")
pytest.importorskip("onnxscript", reason="pip install -e '.[export]'")

torch.set_num_threads(1)
OPTIONS = DecodeOptions(chunk_size=4, left_chunks=2, beam=3)


def test_decode_streams_equals_one_stream_at_a_time(model, tokenizer):
    waves = [noise(s, seed, SAMPLE_RATE) for seed, s in enumerate((1.3, 0.7, 2.2))]
    build = recognizer_factory(model, tokenizer, OPTIONS)
    together = decode_streams(build(), waves, batch=3)
    alone = [decode_streams(build(), [w], batch=1)[0] for w in waves]
    assert together == alone and any(together)


def test_onnx_backend_row_equals_eager_and_errors_are_counted(tokenizer, tmp_path):
    from asr.serve.export import EncoderStep, export_onnx

    model = fitted_model(tokenizer)  # inputs ~N(0, 1), as a trained model's
    onnx_path = export_onnx(EncoderStep(model.encoder, OPTIONS.chunk_size, OPTIONS.left_chunks), tmp_path / "step.onnx")
    waves = [noise(s, 10 + i, SAMPLE_RATE) for i, s in enumerate((1.1, 1.9))]
    eager_texts = decode_streams(recognizer_factory(model, tokenizer, OPTIONS)(), waves)
    refs = [eager_texts[0], "zz " + eager_texts[1]]  # one exact reference, one with an extra word
    results = compare_backends(
        {"eager": recognizer_factory(model, tokenizer, OPTIONS),
         "onnx": recognizer_factory(model, tokenizer, OPTIONS, onnx_path=str(onnx_path))},
        waves, refs,
    )
    eager, onnx = results
    assert onnx.texts == eager.texts == eager_texts
    assert eager.errors.word_errors == onnx.errors.word_errors == 1  # the inserted "zz" is a deletion
    assert eager.cpu_s > 0 and eager.audio_s == pytest.approx(3.0)
    table = format_table(results)
    assert "| onnx |" in table and "| 2/2 |" in table


def test_compare_refuses_mismatched_references(model, tokenizer):
    with pytest.raises(ValueError, match="2 waves but 1 references"):
        compare_backends({"eager": recognizer_factory(model, tokenizer, OPTIONS)},
                         [noise(0.5, 1, SAMPLE_RATE)] * 2, ["a"])
