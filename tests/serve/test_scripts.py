"""scripts/serve.py and scripts/client.py as processes on loopback."""

import os
import subprocess
import sys
from pathlib import Path

import soundfile as sf

from asr.data.features import SAMPLE_RATE
from tests.serve.helpers import noise, save_checkpoint

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


def test_client_talks_to_server(tmp_path):
    ckpt = save_checkpoint(tmp_path)
    wav = tmp_path / "a.wav"
    sf.write(wav, noise(1.5, 0, SAMPLE_RATE).numpy(), SAMPLE_RATE)
    server = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts/serve.py"), "--checkpoint", str(ckpt), "--port", "0",
         "--chunk-size", "4", "--left-chunks", "2", "--vad", "none"],  # noise is all the test audio has
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
    )
    try:
        line = server.stdout.readline()
        assert line.startswith("serving on ws://127.0.0.1:"), line + server.stderr.read()
        uri = line.split()[2]
        client = subprocess.run(
            [sys.executable, str(ROOT / "scripts/client.py"), "--uri", uri, "--fast", str(wav),
             str(tmp_path / "missing.wav")],
            capture_output=True, text=True, env=ENV, timeout=120,
        )
        refused = subprocess.run(  # a rate the server does not decode: it answers failed
            [sys.executable, str(ROOT / "scripts/client.py"), "--uri", uri + "/?sample_rate=8000", "--fast", str(wav)],
            capture_output=True, text=True, env=ENV, timeout=120,
        )
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert client.returncode == 1  # the missing file
    assert "missing.wav" in client.stderr
    assert "== a.wav (1.50 s)" in client.stdout and "final 1:" in client.stdout and "words:" in client.stdout
    assert refused.returncode == 1 and "server error: sample_rate 8000" in refused.stderr


def test_client_reports_an_unreachable_server(tmp_path):
    wav = tmp_path / "a.wav"
    sf.write(wav, noise(0.5, 0, SAMPLE_RATE).numpy(), SAMPLE_RATE)
    client = subprocess.run(
        [sys.executable, str(ROOT / "scripts/client.py"), "--uri", "ws://127.0.0.1:9", str(wav)],
        capture_output=True, text=True, env=ENV, timeout=60,
    )
    assert client.returncode == 1 and "cannot reach" in client.stderr


def test_server_defaults_to_the_live_settings():
    """A microphone's silence stays out of the encoder and endpoints restart it: serve.py's defaults
    are the settings the live benchmark chose (data/results/live.md)."""
    out = subprocess.run([sys.executable, str(ROOT / "scripts/serve.py"), "--help"], capture_output=True, text=True,
                         env=ENV, timeout=120).stdout
    flat = " ".join(out.split())
    assert "(default silero)" in flat and "(default both)" in flat, flat
