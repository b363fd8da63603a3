"""The WebSocket server on loopback: the Wenet protocol end to end, and bad clients that must not hurt others."""

import asyncio
import copy
import json

import numpy as np
import pytest
import torch
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from asr.data.features import SAMPLE_RATE
from asr.decode.options import DecodeOptions
from asr.serve.client import Reply, stream_audio
from asr.decode.endpoint import EndpointConfig
from asr.serve.protocol import float_to_pcm16
from asr.serve.multi_stream import MultiStreamRecognizer
from asr.serve.server import AsrServer, ServerConfig
from tests.serve.helpers import noise

torch.set_num_threads(1)
C, LEFT = 4, 2


def make_server(model, tokenizer, endpoint=None, **limits):
    rec = MultiStreamRecognizer(model, tokenizer, DecodeOptions(chunk_size=C, left_chunks=LEFT, beam=3),
                                endpoint=endpoint or EndpointConfig(enabled=False))
    return AsrServer(rec, ServerConfig(port=0, **limits))


def uri(server):
    return f"ws://127.0.0.1:{server.port}"


def offline_text(model, tokenizer, wave):
    rec = MultiStreamRecognizer(model, tokenizer, DecodeOptions(chunk_size=C, left_chunks=LEFT, beam=3),
                                endpoint=EndpointConfig(enabled=False))
    stream = rec.create_stream()
    stream.accept_waveform(SAMPLE_RATE, wave)
    stream.finish()
    rec.decode()
    return stream.result()


async def exchange(server, messages):
    """Send messages (str or bytes) on one connection; return (replies, close code)."""
    async with connect(uri(server)) as ws:
        for m in messages:
            await ws.send(m)
        return await read_until_closed(ws), ws.close_code


async def read_until_closed(ws):
    """Every reply until the server closes (a non-1000 close ends iteration with an exception)."""
    replies = []
    try:
        async for text in ws:
            replies.append(Reply.parse(text))
    except ConnectionClosed:
        pass
    return replies


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=60))


def test_one_utterance_end_to_end(model, tokenizer):
    wave = noise(2.0, 3, SAMPLE_RATE)

    async def scenario():
        async with make_server(model, tokenizer) as server:
            session = await stream_audio(uri(server), wave.numpy(), SAMPLE_RATE, piece_s=0.1, realtime=False, nbest=2)
            # The client may see the close before the server's handler has removed the stream: wait (bounded).
            for _ in range(100):
                if not server.recognizer.streams:
                    break
                await asyncio.sleep(0.02)
            return session, server.recognizer.streams

    session, streams_left = run(scenario())
    types = [r.type for r in session.replies]
    assert types[0] == "server_ready" and types[-2:] == ["final_result", "speech_end"]
    assert session.close_code == 1000
    final = session.finals[0].nbest
    want = offline_text(model, tokenizer, wave)
    assert len(final) == 2 and final[0]["sentence"] == want.text != ""
    # Word pieces in integer milliseconds, as Wenet sends them.
    assert final[0]["word_pieces"] == [
        {"word": w.word, "start": round(w.start * 1000), "end": round(w.end * 1000)} for w in want.words
    ]
    assert streams_left == []


@pytest.mark.parametrize(
    "messages, error",
    [
        (['{"signal": "start"'], "malformed JSON"),
        (["[" * 10000 + "]" * 10000], "malformed JSON (nested too deeply)"),  # json's decoder recursed to death
        (['{"signal": "start", "nbest": ' + "9" * 5000 + "}"], "malformed JSON"),  # past Python's int digit limit
        (['{"signal": ' + "[" * 500 + "]" * 500 + "}"], "unknown signal [[[[[[[...]]]]]]]"),  # echoed, bounded
        (['["start"]'], "expected a JSON object"),
        (['{"signal": "pause"}'], "unknown signal"),
        (['{"signal": "start", "nbest": "two"}'], "nbest must be an integer"),
        (['{"signal": "start", "continuous_decoding": 1}'], "continuous_decoding must be"),
        ([b"\x00\x01" * 100], "start signal is expected before binary data"),
        (['{"signal": "start"}', b"\x00" * 101], "odd byte count"),
        (['{"signal": "end"}'], "end signal before the start"),
        (['{"signal": "start"}', '{"signal": "start"}'], "start signal received twice"),
        (['{"signal": "start"}', '{"signal": "end"}', b"\x00\x00"], "binary data after the end signal"),
    ],
)
def test_bad_messages_get_a_clear_error_and_others_are_still_served(model, tokenizer, messages, error):
    wave = noise(1.0, 4, SAMPLE_RATE).numpy()

    async def scenario():
        async with make_server(model, tokenizer) as server:
            replies, code = await exchange(server, messages)
            good = await stream_audio(uri(server), wave, SAMPLE_RATE, realtime=False)
            return replies, code, good

    replies, code, good = run(scenario())
    failures = [r for r in replies if r.status == "failed"]
    assert len(failures) == 1 and error in failures[0].message and code == 1008
    assert good.finals and good.close_code == 1000


def test_oversize_frame_is_closed_and_others_are_still_served(model, tokenizer):
    async def scenario():
        async with make_server(model, tokenizer, max_frame_bytes=4096) as server:
            _, code = await exchange(server, ['{"signal": "start"}', b"\x00" * 8192])
            good = await stream_audio(uri(server), np.zeros(SAMPLE_RATE // 2, np.float32), SAMPLE_RATE,
                                      piece_s=0.05, realtime=False)
            return code, good

    code, good = run(scenario())
    assert code == 1009  # message too big
    assert good.close_code == 1000 and good.finals


def test_disconnect_mid_utterance_frees_the_stream(model, tokenizer):
    wave = noise(1.0, 5, SAMPLE_RATE).numpy()

    async def scenario():
        async with make_server(model, tokenizer) as server:
            async with connect(uri(server)) as ws:
                await ws.send('{"signal": "start"}')
                assert Reply.parse(await ws.recv()).type == "server_ready"
                await ws.send(float_to_pcm16(wave[: SAMPLE_RATE // 2]))
                assert server.recognizer.streams  # the stream exists while the client is there
            for _ in range(100):  # the handler notices the close asynchronously
                if not server.recognizer.streams:
                    break
                await asyncio.sleep(0.02)
            left = list(server.recognizer.streams)
            good = await stream_audio(uri(server), wave, SAMPLE_RATE, realtime=False)
            return left, good

    left, good = run(scenario())
    assert left == []
    assert good.finals and good.close_code == 1000


def test_connections_over_the_limit_are_refused(model, tokenizer):
    async def scenario():
        async with make_server(model, tokenizer, max_connections=2) as server:
            first, second = await connect(uri(server)), await connect(uri(server))
            await first.send('{"signal": "start"}')
            await second.send('{"signal": "start"}')
            refused, code = await exchange(server, [])
            await first.close()
            await asyncio.sleep(0.1)
            again = await stream_audio(uri(server), np.zeros(SAMPLE_RATE // 2, np.float32), SAMPLE_RATE,
                                       realtime=False)
            await second.close()
            return refused, code, again, server.rejected_connections

    refused, code, again, rejected = run(scenario())
    assert code == 1013 and rejected == 1
    assert refused[0].status == "failed" and "server busy" in refused[0].message
    assert again.finals and again.close_code == 1000


def test_audio_faster_than_decoding_is_refused(model, tokenizer):
    async def scenario():
        async with make_server(model, tokenizer, max_backlog_s=0.5) as server:
            return await exchange(server, ['{"signal": "start"}', float_to_pcm16(np.zeros(3 * SAMPLE_RATE))])

    replies, code = run(scenario())
    assert replies[-1].status == "failed" and "faster than it is decoded" in replies[-1].message and code == 1008


def stream_blank(model, tokenizer, **options):
    """11 s of noise, sent at once, through ``model`` made to hear only blanks (the 5 s no-speech rule
    fires) behind a server with endpointing on; ``options`` go to ``stream_audio``."""
    silent = copy.deepcopy(model)
    with torch.no_grad():
        silent.ctc_proj.bias[model.blank_id] += 100.0  # every frame is blank: the 5 s no-speech rule fires
    wave = noise(11.0, 6, SAMPLE_RATE).numpy()

    async def scenario():
        # 11 s sent at once: with the default 10 s backlog bound a loaded machine (the full suite on 2
        # cores) may not decode up to the first endpoint before the bound refuses the audio ("faster than
        # it is decoded": seen once in CI). Backpressure has its own test; here it would only be a race.
        async with make_server(silent, tokenizer, endpoint=EndpointConfig(), max_backlog_s=60.0) as server:
            return await stream_audio(uri(server), wave, SAMPLE_RATE, piece_s=0.5, realtime=False, **options)

    return run(scenario())


@pytest.mark.parametrize("continuous", [True, False])
def test_endpoints_and_continuous_decoding(model, tokenizer, continuous):
    session = stream_blank(model, tokenizer, continuous_decoding=continuous)
    types = [r.type for r in session.replies]
    if continuous:  # endpoints at 5 s and 10 s, then the end of the audio
        assert types.count("final_result") == 3 and types[-1] == "speech_end"
    else:  # recognition stops at the first endpoint even though audio keeps coming
        assert types == ["server_ready", "final_result", "speech_end"]
    assert session.close_code == 1000


def test_reply_json_matches_wenet_field_names(model, tokenizer):
    async def scenario():
        async with make_server(model, tokenizer) as server:
            async with connect(uri(server)) as ws:
                await ws.send(json.dumps({"signal": "start", "nbest": 1, "continuous_decoding": False}))
                ready = json.loads(await ws.recv())
                await ws.send(float_to_pcm16(noise(1.0, 8, SAMPLE_RATE).numpy()))
                partial = json.loads(await ws.recv())  # the stream is not finished: this is a partial
                await ws.send(json.dumps({"signal": "end"}))
                raw = [json.loads(t) async for t in ws]
                return ready, partial, raw

    ready, partial, raw = run(scenario())
    assert ready == {"status": "ok", "type": "server_ready"}
    assert partial["type"] == "partial_result" and partial["status"] == "ok"
    assert set(json.loads(partial["nbest"])[0]) == {"sentence"}  # word pieces only in final results
    final = next(r for r in raw if r["type"] == "final_result")
    assert set(final) == {"status", "type", "nbest"} and isinstance(final["nbest"], str)
    paths = json.loads(final["nbest"])
    assert set(paths[0]) == {"sentence", "word_pieces"}
    assert all(set(w) == {"word", "start", "end"} and isinstance(w["start"], int) for w in paths[0]["word_pieces"])
    assert raw[-1] == {"status": "ok", "type": "speech_end"}


def test_segment_times_give_each_final_its_stream_span(model, tokenizer):
    segments = [r.segment for r in stream_blank(model, tokenizer, continuous_decoding=True, segment_times=True).finals]
    frame_ms = 40  # 4x subsampling of 10 ms frames
    chunk_ms = C * frame_ms
    # endpoints at the first chunk ends past 5 s and 10 s of blank, then the end of the audio
    assert [s["index"] for s in segments] == [0, 1, 2]
    assert segments[0]["start"] == 0 and segments[0]["end"] == -(-5000 // chunk_ms) * chunk_ms
    assert segments[1]["start"] == segments[0]["end"] and segments[2]["start"] == segments[1]["end"]
    assert segments[1]["end"] - segments[1]["start"] == segments[0]["end"]
    assert 11000 - 200 <= segments[2]["end"] <= 11000
