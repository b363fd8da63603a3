"""scripts/client.py's file loop (asr.serve.client.stream_files) against a server on loopback: what counts as a
failed file, non-finite samples, and what a silent file that the server ends early prints."""

import copy

import numpy as np
import pytest
import soundfile as sf
import torch

from asr.data.features import SAMPLE_RATE
from asr.decode.options import DecodeOptions
from asr.serve.client import stream_files
from asr.decode.endpoint import EndpointConfig, EndpointRule
from asr.serve.protocol import float_to_pcm16
from asr.serve.multi_stream import MultiStreamRecognizer
from asr.serve.server import AsrServer, ServerConfig
from tests.serve.browser import running
from tests.serve.helpers import noise

torch.set_num_threads(1)


def server_for(model, tokenizer, endpoint=None) -> AsrServer:
    rec = MultiStreamRecognizer(model, tokenizer, DecodeOptions(chunk_size=4, left_chunks=2, beam=3),
                                endpoint=endpoint or EndpointConfig(enabled=False))
    return AsrServer(rec, ServerConfig(port=0))


@pytest.fixture
def wav(tmp_path):
    path = tmp_path / "a.wav"
    sf.write(path, noise(1.0, 2, SAMPLE_RATE).numpy(), SAMPLE_RATE)
    return str(path)


def test_a_file_the_server_refuses_counts_as_failed(model, tokenizer, wav, capsys):
    with running(server_for(model, tokenizer)) as server:
        uri = f"ws://127.0.0.1:{server.port}"
        assert stream_files([wav], uri, realtime=False) == 0
        assert stream_files([wav, wav], uri + "/?sample_rate=8000", realtime=False) == 2  # refused: rate
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith(f"error: {wav}: server error: sample_rate 8000") for line in err)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_samples_get_a_one_line_error_and_are_not_sent(model, tokenizer, wav, tmp_path, capsys, bad):
    samples = noise(1.0, 3, SAMPLE_RATE).numpy()
    samples[[100, 5000]] = bad
    broken = tmp_path / "broken.wav"
    sf.write(broken, samples, SAMPLE_RATE, subtype="FLOAT")
    server = server_for(model, tokenizer)
    with running(server):
        failed = stream_files([str(broken), wav], f"ws://127.0.0.1:{server.port}", realtime=False)
    out = capsys.readouterr()
    assert failed == 1 and "== a.wav" in out.out and "broken.wav" not in out.out  # the next file goes on
    assert out.err.strip().splitlines() == [f"error: audio holds 2 non-finite samples (NaN or inf) of 16000: "
                                            f"{broken}; nothing sent"]
    with pytest.raises(ValueError, match="1 of 3 samples are not finite"):
        float_to_pcm16(np.array([0.0, bad, 0.5]))


def test_a_silent_file_ended_at_an_endpoint_says_so(model, tokenizer, tmp_path, capsys):
    silent = copy.deepcopy(model)
    with torch.no_grad():
        silent.ctc_proj.bias[model.blank_id] += 100.0  # every frame is blank
    path = tmp_path / "silence.wav"
    sf.write(path, np.zeros(3 * SAMPLE_RATE, np.int16), SAMPLE_RATE)
    endpoint = EndpointConfig(rules=(EndpointRule(must_contain_speech=False, min_trailing_silence_s=0.5),))
    with running(server_for(silent, tokenizer, endpoint)) as server:
        failed = stream_files([str(path)], f"ws://127.0.0.1:{server.port}", realtime=True)
    out = capsys.readouterr().out
    assert failed == 0, out
    assert "final 1: (nothing recognized)" in out
    assert "recognition ended at an endpoint after " in out and " s of 3.00 s (--continuous decodes the rest)" in out
