"""The multi-stream recognizer and the server on the ONNX backend (exported step, eager last chunk) equal the eager
backend."""

import asyncio
from pathlib import Path

import pytest
import torch

from asr.data.features import SAMPLE_RATE
from asr.decode.options import DecodeOptions
from asr.serve.client import stream_audio
from asr.serve.encoders import OnnxChunkEncoder
from asr.decode.endpoint import EndpointConfig
from asr.serve.export import EncoderStep, OnnxEncoderStep, export_onnx
from asr.serve.multi_stream import MultiStreamRecognizer
from asr.serve.server import AsrServer, ServerConfig
from tests.serve.helpers import fitted_model, noise, tiny_model

pytest.importorskip("onnxruntime", reason="pip install -e '.[export]'")
pytest.importorskip("onnxscript", reason="pip install -e '.[export]'")

torch.set_num_threads(1)
C, LEFT = 4, 2
TOLERANCE = 1e-4  # the bar for exported == eager
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def model(tokenizer):
    return fitted_model(tokenizer)  # inputs ~N(0, 1), as a trained model's


@pytest.fixture(scope="module")
def onnx_path(model, tmp_path_factory):
    return export_onnx(EncoderStep(model.encoder, C, LEFT), tmp_path_factory.mktemp("onnx") / "step.onnx")


def recognizer(model, tokenizer, onnx_path=None, left_chunks=LEFT):
    chunk_encoder = None
    if onnx_path is not None:
        chunk_encoder = OnnxChunkEncoder(OnnxEncoderStep(onnx_path), model.encoder, C, left_chunks)
    return MultiStreamRecognizer(model, tokenizer, DecodeOptions(chunk_size=C, left_chunks=left_chunks, beam=3),
                                 endpoint=EndpointConfig(enabled=False), chunk_encoder=chunk_encoder)


def decode_in_pieces(rec, wave, piece_s=0.23):
    """One stream fed in pieces that are not a chunk multiple, a decode() after each; the finished stream."""
    piece = int(piece_s * SAMPLE_RATE)
    stream = rec.create_stream()
    for start in range(0, len(wave), piece):
        stream.accept_waveform(SAMPLE_RATE, wave[start : start + piece])
        rec.decode()
    stream.finish()
    rec.decode()
    return stream


@pytest.mark.parametrize("seconds", [1.7, 0.9])
def test_onnx_recognizer_equals_eager(model, tokenizer, onnx_path, seconds):
    # Lengths that end inside a chunk, so the stream also takes the eager last-chunk path from an ONNX state.
    wave = noise(seconds, 1, SAMPLE_RATE)
    want = decode_in_pieces(recognizer(model, tokenizer), wave)
    got = decode_in_pieces(recognizer(model, tokenizer, onnx_path), wave)
    assert got.is_done() and want.is_done()
    want_out, got_out = torch.cat(want._utt.enc_out), torch.cat(got._utt.enc_out)  # (T', D)
    assert got_out.shape == want_out.shape and got_out.size(0) % C != 0  # the last chunk was partial
    assert (got_out - want_out).abs().max().item() <= TOLERANCE
    assert got.result(3) == want.result(3) and want.result().text != ""


def test_onnx_state_turns_into_the_eager_state(model, onnx_path):
    """The exported state after some chunks, cut to its valid frames, is the eager state (this feeds the last chunk)."""
    feats = torch.randn(1, 200, 80) - 5.0
    runner = OnnxEncoderStep(onnx_path)
    chunk_encoder = OnnxChunkEncoder(runner, model.encoder, C, LEFT)
    spec = runner.spec
    eager_state = model.encoder.init_state(1, C, LEFT)
    onnx_state = runner.initial_state()
    for i in range(LEFT + 2):  # past the point where the caches are full and roll
        window = feats[:, i * spec.chunk_step : i * spec.chunk_step + spec.chunk_span]
        _, onnx_state = runner.run(window.numpy(), onnx_state)
        model.encoder.stream_step(window, eager_state)
        eager_state.feats = None
        converted = chunk_encoder.to_stream_state(onnx_state, torch.device("cpu"))
        assert converted.time == eager_state.time
        for got, want in zip(converted.layers, eager_state.layers):
            assert got.key.shape == want.key.shape and got.conv.shape == want.conv.shape
            assert (got.key - want.key).abs().max() <= TOLERANCE and (got.conv - want.conv).abs().max() <= TOLERANCE


def test_onnx_export_with_other_settings_is_refused(model, onnx_path):
    with pytest.raises(ValueError, match="left_chunks: export 2 vs model 3"):
        OnnxChunkEncoder(OnnxEncoderStep(onnx_path), model.encoder, C, 3)


def test_server_final_on_onnx_backend_equals_eager_backend(model, tokenizer, onnx_path):
    wave = noise(2.1, 11, SAMPLE_RATE).numpy()

    async def final(rec):
        async with AsrServer(rec, ServerConfig(port=0)) as server:
            session = await stream_audio(f"ws://127.0.0.1:{server.port}", wave, SAMPLE_RATE, piece_s=0.1,
                                         realtime=False, nbest=2)
            return session.finals

    eager = asyncio.run(asyncio.wait_for(final(recognizer(model, tokenizer)), timeout=60))
    onnx = asyncio.run(asyncio.wait_for(final(recognizer(model, tokenizer, onnx_path)), timeout=60))
    assert len(eager) == len(onnx) == 1
    assert onnx[0].nbest == eager[0].nbest and eager[0].nbest[0]["sentence"] != ""  # sentences and word times


def load_serve_script():
    import asr.cli.serve

    return asr.cli.serve


def test_serve_script_builds_the_onnx_backend_and_checks_its_arguments(tmp_path, capsys, onnx_path):
    from tests.serve.helpers import save_checkpoint

    script = load_serve_script()
    ckpt = save_checkpoint(tmp_path)
    with pytest.raises(SystemExit):
        script.parse_args(["--checkpoint", str(ckpt), "--backend", "onnx"])
    assert "--backend onnx needs --onnx-model" in capsys.readouterr().err
    args = script.parse_args(["--checkpoint", str(ckpt), "--backend", "onnx", "--onnx-model", str(onnx_path),
                              "--chunk-size", str(C), "--left-chunks", str(LEFT)])
    server = script.build_server(args)
    assert isinstance(server.recognizer.chunk_encoder, OnnxChunkEncoder)
    args.left_chunks = 3
    with pytest.raises(ValueError, match="exported with other settings"):
        script.build_server(args)



def test_export_leaves_eager_streaming_unchanged(tokenizer, tmp_path):
    """Exporting traces the rel_xl position table; the tracer's table once stayed cached and every later
    eager step of the process was off by 0.04 (the ONNX step was right, eager was wrong)."""
    from asr.model.scorers import rel_xl

    model = tiny_model(tokenizer, seed=3)
    feats = torch.randn(1, 120, 80) - 5.0

    def eager_out():
        out, _ = model.encoder.stream_step(feats, model.encoder.init_state(1, C, LEFT), final=True)
        return out

    rel_xl._TABLES.clear()  # so the export builds the table (a table cached before it is reused, not traced)
    export_onnx(EncoderStep(model.encoder, C, LEFT), tmp_path / "step.onnx")
    after_export = eager_out()
    rel_xl._TABLES.clear()
    assert torch.equal(after_export, eager_out())
