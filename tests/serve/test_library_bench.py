"""The WebSocket library benchmark runs each server in a child process and counts every message."""

import importlib.util

import pytest

from asr.serve.library_bench import measure


def test_websockets_server_answers_every_frame():
    r = measure("websockets", clients=2, frames=5, timeout_s=60)
    assert r["messages"] == 10 and r["wall_s"] > 0 and r["server_cpu_ms_per_message"] >= 0


@pytest.mark.skipif(importlib.util.find_spec("fastapi") is None or importlib.util.find_spec("uvicorn") is None,
                    reason="pip install fastapi uvicorn")
def test_fastapi_server_answers_every_frame():
    r = measure("fastapi", clients=2, frames=5, timeout_s=60)
    assert r["messages"] == 10 and r["messages_per_s"] > 0


def test_unknown_library_is_refused():
    with pytest.raises(ValueError, match="library must be one of"):
        measure("tornado", 1, 1)
