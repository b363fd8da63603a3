"""WebSocket handshakes from other web origins are refused (403); the server's own page, origins given with
--allow-origin and clients without an Origin header (Wenet's) connect."""

from __future__ import annotations

import asyncio
import json

import pytest
from websockets.asyncio.client import connect
from websockets.datastructures import Headers
from websockets.exceptions import InvalidStatus
from websockets.http11 import Request

from asr.cli import serve as serve_script
from asr.decode.options import DecodeOptions
from asr.decode.endpoint import EndpointConfig
from asr.serve.multi_stream import MultiStreamRecognizer
from asr.serve.origin import OriginPolicy, normalize_origin
from asr.serve.server import AsrServer, ServerConfig

START = json.dumps({"signal": "start", "nbest": 1, "continuous_decoding": False})


def request(origin: str | None, host: str = "127.0.0.1:10086") -> Request:
    headers = Headers([("Host", host), ("Upgrade", "websocket")])
    if origin is not None:
        headers["Origin"] = origin
    return Request("/", headers)


@pytest.mark.parametrize("origin, host, allowed, accepted", [
    (None, "127.0.0.1:10086", (), True),  # Wenet's clients, scripts: no Origin
    ("http://127.0.0.1:10086", "127.0.0.1:10086", (), True),  # the page --web serves
    ("http://LOCALHOST:10086", "localhost:10086", (), True),
    ("http://[::1]:10086", "[::1]:10086", (), True),
    ("https://evil.example", "127.0.0.1:10086", (), False),
    ("http://127.0.0.1:8000", "127.0.0.1:10086", (), False),  # another local server's page
    ("https://127.0.0.1:10086", "127.0.0.1:10086", (), True),  # the same address behind TLS
    ("http://evil.example:10086", "evil.example:10086", (), False),  # a name re-pointed at 127.0.0.1
    ("null", "127.0.0.1:10086", (), False),  # a sandboxed frame or a file:// page
    ("https://app.example", "127.0.0.1:10086", ("https://app.example:443",), True),
    ("https://other.example", "127.0.0.1:10086", ("https://app.example",), False),
    ("https://other.example", "127.0.0.1:10086", ("*",), True),
])
def test_the_policy(origin, host, allowed, accepted):
    refusal = OriginPolicy(allowed, loopback_only=True).refusal(request(origin, host))
    assert (refusal is None) == accepted, refusal
    if not accepted:
        assert "may not connect" in refusal


def test_a_server_bound_to_all_interfaces_takes_its_own_origin_under_any_name():
    policy = OriginPolicy(loopback_only=False)
    assert policy.refusal(request("http://asr.lan:10086", "asr.lan:10086")) is None
    assert policy.refusal(request("http://evil.example", "asr.lan:10086")) is not None


@pytest.mark.parametrize("bad", ["ftp://x", "example.com", "http://x/page", "http://x:port", ""])
def test_an_allowed_origin_must_be_an_origin(bad):
    with pytest.raises(ValueError, match="is not scheme://host"):
        normalize_origin(bad)
    with pytest.raises(SystemExit):
        serve_script.parse_args(["--checkpoint", "x.ckpt", "--allow-origin", bad])


def test_handshakes_on_loopback(model, tokenizer):
    async def main():
        rec = MultiStreamRecognizer(model, tokenizer, DecodeOptions(chunk_size=4, left_chunks=2),
                                    endpoint=EndpointConfig(enabled=False))
        async with AsrServer(rec, ServerConfig(port=0, web=True, allowed_origins=("https://app.example",))) as server:
            uri = f"ws://127.0.0.1:{server.port}"

            async def ready(origin):
                async with connect(uri, origin=origin) as ws:
                    await ws.send(START)
                    return json.loads(await ws.recv())["type"]

            assert await ready(None) == "server_ready"
            assert await ready(f"http://127.0.0.1:{server.port}") == "server_ready"
            assert await ready("https://app.example") == "server_ready"
            with pytest.raises(InvalidStatus) as refused:
                await ready("https://evil.example")
            assert refused.value.response.status_code == 403
            assert b"may not connect" in refused.value.response.body
            assert server.origin_refused == 1
    asyncio.run(asyncio.wait_for(main(), timeout=60))


def test_serve_says_one_line_for_a_bad_option_and_keeps_a_bug_s_traceback(monkeypatch, capsys):
    def bug(args):
        raise KeyError("model_kwargs")

    monkeypatch.setattr(serve_script, "build_server", bug)
    with pytest.raises(KeyError, match="model_kwargs"):
        serve_script.main(["--checkpoint", "x.ckpt", "--vad", "none"])

    class Busy:
        async def start(self):
            raise OSError(98, "Address already in use")

    monkeypatch.setattr(serve_script, "build_server", lambda args: Busy())
    assert serve_script.main(["--checkpoint", "x.ckpt", "--vad", "none", "--port", "10086"]) == 2
    assert capsys.readouterr().err == "error: cannot serve on 127.0.0.1:10086: [Errno 98] Address already in use\n"
