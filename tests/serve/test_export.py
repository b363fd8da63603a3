"""The exported encoder step (ONNX Runtime and TorchScript), chunk by chunk, equals eager stream_step."""

import numpy as np
import pytest
import torch

from asr.data.features import SAMPLE_RATE, FbankExtractor
from asr.model.positions import POSITION_SCHEMES, TooLongForTable
from asr.serve.export import (
    EncoderStep,
    ExportError,
    OnnxEncoderStep,
    export_onnx,
    export_torchscript,
    load_torchscript,
    quantize_int8,
    whole_chunks,
)
from tests.serve.helpers import noise, tiny_model

pytest.importorskip("onnxruntime", reason="pip install -e '.[export]'")
pytest.importorskip("onnxscript", reason="pip install -e '.[export]'")

torch.set_num_threads(1)
C, LEFT = 4, 2
TOLERANCE = 1e-4  # the bar for exported == eager


def utterance_feats(seconds: float = 2.0, seed: int = 1) -> torch.Tensor:
    return FbankExtractor()(noise(seconds, seed, SAMPLE_RATE))[None]  # (1, T, F)


def eager_whole_chunks(encoder, feats: torch.Tensor, chunks: int) -> torch.Tensor:
    """stream_step over the utterance, cut to its whole chunks: (1, chunks * C, D)."""
    out, _ = encoder.stream_step(feats, encoder.init_state(1, C, LEFT))
    return out[:, : chunks * C]


def run_onnx(path, chunks) -> torch.Tensor:
    runner = OnnxEncoderStep(path)
    return torch.from_numpy(np.concatenate([runner.step(chunk.numpy()) for chunk in chunks], axis=1))


@pytest.mark.parametrize("scheme", POSITION_SCHEMES)
def test_onnx_step_equals_eager_over_an_utterance(tokenizer, tmp_path, scheme):
    encoder = tiny_model(tokenizer, scheme).encoder
    step = EncoderStep(encoder, C, LEFT)
    feats = utterance_feats()
    chunks = whole_chunks(feats, step.spec)
    assert len(chunks) > LEFT + 2  # past the warm-up: the caches were full and rolling for several chunks
    want = eager_whole_chunks(encoder, feats, len(chunks))
    got = run_onnx(export_onnx(step, tmp_path / "step.onnx"), chunks)
    assert got.shape == want.shape
    assert (got - want).abs().max().item() <= TOLERANCE


@pytest.mark.parametrize("scheme", ["rel_xl", "abs_sin", "wenet_rel"])
def test_a_lookahead_step_equals_eager_over_an_utterance(tokenizer, tmp_path, scheme):
    """The span holds the chunk and its lookahead; the step emits and caches the chunk's frames alone."""
    encoder = tiny_model(tokenizer, scheme, chunk_lookahead=3).encoder
    step = EncoderStep(encoder, C, LEFT)
    assert step.spec.chunk_span == step.spec.chunk_step + 3 + 3 * 4  # subsampling window 7, rate 4
    feats = utterance_feats(seed=3)
    chunks = whole_chunks(feats, step.spec)
    assert len(chunks) > LEFT + 2
    want = eager_whole_chunks(encoder, feats, len(chunks))
    got = run_onnx(export_onnx(step, tmp_path / "step.onnx"), chunks)
    assert got.shape == want.shape
    assert (got - want).abs().max().item() <= TOLERANCE


def test_torchscript_step_equals_eager_and_carries_its_spec(tokenizer, tmp_path):
    encoder = tiny_model(tokenizer, "rel_xl").encoder
    step = EncoderStep(encoder, C, LEFT)
    feats = utterance_feats(seed=2)
    chunks = whole_chunks(feats, step.spec)
    module, spec = load_torchscript(export_torchscript(step, tmp_path / "step.pt"))
    assert spec == step.spec
    state, outs = spec.initial_state(), []
    with torch.no_grad():
        for chunk in chunks:
            out, *state = module(chunk, *state)
            outs.append(out)
    want = eager_whole_chunks(encoder, feats, len(chunks))
    assert (torch.cat(outs, dim=1) - want).abs().max().item() <= TOLERANCE
    assert int(state[-1]) == len(chunks) * C and int(state[-2]) == LEFT * C  # time and valid cached frames


def test_int8_model_is_smaller_and_close(tokenizer, tmp_path):
    encoder = tiny_model(tokenizer, "rel_xl").encoder
    step = EncoderStep(encoder, C, LEFT)
    chunks = whole_chunks(utterance_feats(seed=3), step.spec)
    fp32 = export_onnx(step, tmp_path / "step.onnx")
    int8 = quantize_int8(fp32, tmp_path / "step.int8.onnx")
    assert int8.stat().st_size < fp32.stat().st_size
    want, got = run_onnx(fp32, chunks), run_onnx(int8, chunks)
    # Quantized weights change the numbers, not the function: the outputs stay strongly correlated.
    assert not torch.equal(got, want)
    assert torch.corrcoef(torch.stack([got.flatten(), want.flatten()]))[0, 1] > 0.95


def test_abs_learned_runner_refuses_chunks_past_its_table(tokenizer, tmp_path):
    encoder = tiny_model(tokenizer, "abs_learned", max_len=3 * C).encoder
    step = EncoderStep(encoder, C, LEFT)
    runner = OnnxEncoderStep(export_onnx(step, tmp_path / "step.onnx"))
    chunks = whole_chunks(utterance_feats(), step.spec)
    for chunk in chunks[:3]:
        runner.step(chunk.numpy())
    with pytest.raises(TooLongForTable, match="max_len=12"):
        runner.step(chunks[3].numpy())


def test_settings_that_cannot_be_a_fixed_state_say_why(tokenizer):
    encoder = tiny_model(tokenizer, "rel_xl").encoder
    with pytest.raises(ExportError, match="left_chunks .-1. must be >= 1"):
        EncoderStep(encoder, C, -1)
    with pytest.raises(ValueError, match="chunk_size > 0"):
        EncoderStep(encoder, 0, LEFT)
    with pytest.raises(ValueError, match=r"feats must be \(1, T, 80\)"):
        whole_chunks(torch.zeros(2, 50, 80), EncoderStep(encoder, C, LEFT).spec)


def test_export_script_writes_files_that_load_and_refuses_unbounded_memory(tmp_path, capsys):
    import asr.cli.export as script
    from tests.serve.helpers import save_checkpoint

    ckpt = save_checkpoint(tmp_path)
    assert script.main(["--checkpoint", str(ckpt), "--out-dir", str(tmp_path / "out"), "--left-chunks", "-1"]) == 2
    assert "cannot export: left_chunks (-1) must be >= 1" in capsys.readouterr().err
    out = tmp_path / "out"
    assert script.main(["--checkpoint", str(ckpt), "--out-dir", str(out), "--chunk-size", "4", "--left-chunks", "2",
                        "--format", "onnx"]) == 0
    runner = OnnxEncoderStep(out / "encoder_step.onnx")
    assert (runner.spec.chunk_size, runner.spec.left_chunks, runner.spec.pos_enc) == (4, 2, "rel_xl")
    assert "wrote" in capsys.readouterr().out
