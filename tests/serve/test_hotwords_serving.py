"""Hotwords per stream in the MultiStreamRecognizer and per connection in the server: isolation, merging, bad input."""

import asyncio
import json

import pytest
import torch
from websockets.asyncio.client import connect

from asr.data.features import SAMPLE_RATE
from asr.decode.hotwords import HotwordError
from asr.decode.options import DecodeOptions
from asr.serve.client import stream_audio
from asr.decode.endpoint import EndpointConfig
from asr.serve.multi_stream import MultiStreamRecognizer
from asr.serve.server import AsrServer, ServerConfig
from tests.serve.helpers import noise
from tests.serve.test_server import read_until_closed, run, uri

torch.set_num_threads(1)
C, LEFT = 4, 2
WAVE = noise(2.0, 5, SAMPLE_RATE)


def recognizer(model, tokenizer, hotwords=(), **options):
    # every token is tried each frame (beam >= vocab), so a strong list surely wins
    return MultiStreamRecognizer(model, tokenizer,
                                 DecodeOptions(chunk_size=C, left_chunks=LEFT, beam=tokenizer.vocab_size, **options),
                                 endpoint=EndpointConfig(enabled=False), hotwords=hotwords)


def final_text(rec, hotwords=None):
    stream = rec.create_stream(hotwords=hotwords)
    stream.accept_waveform(SAMPLE_RATE, WAVE)
    stream.finish()
    rec.decode()
    rec.remove_stream(stream)
    return stream.result().text


def test_each_stream_is_biased_by_its_own_list_only(model, tokenizer):
    plain = final_text(recognizer(model, tokenizer))
    rec = recognizer(model, tokenizer)
    streams = {name: rec.create_stream(hotwords=words) for name, words in
               [("abc", ["abc:50"]), ("fgh", [("fgh", 50.0)]), ("none", None)]}
    for stream in streams.values():
        stream.accept_waveform(SAMPLE_RATE, WAVE)
        stream.finish()
    rec.decode()  # all three in the same batched steps
    texts = {name: s.result().text for name, s in streams.items()}
    # (a char tokenizer's phrase has no word marker, so the bonus may repeat it inside one word)
    assert "abc" in texts["abc"] and "fgh" not in texts["abc"] and "abc" not in plain
    assert "fgh" in texts["fgh"] and "abc" not in texts["fgh"] and "fgh" not in plain
    assert texts["none"] == plain  # no list: exactly the result without biasing
    assert texts["abc"] == final_text(recognizer(model, tokenizer), ["abc:50"])


def test_server_wide_list_is_merged_with_the_streams_and_compiled_once(model, tokenizer):
    rec = recognizer(model, tokenizer, hotwords=["de:50"])
    a, b = rec.compile_hotwords(["abc"]), rec.compile_hotwords(["abc"])
    assert a is b and {p for p, _ in a.phrases} == {"de", "abc"}
    assert rec.compile_hotwords(None).phrases == (("de", 50.0),)
    assert "de" in final_text(rec)
    with pytest.raises(HotwordError, match="cannot spell"):
        recognizer(model, tokenizer, hotwords=["xyz"])
    with pytest.raises(HotwordError, match="empty hotword"):
        rec.create_stream(hotwords=[" "])
    assert rec.streams == []


def test_two_connections_two_lists(model, tokenizer):
    expected = {w: final_text(recognizer(model, tokenizer), [f"{w}:50"]) for w in ("abc", "fgh")}
    plain = final_text(recognizer(model, tokenizer))

    async def scenario():
        async with AsrServer(recognizer(model, tokenizer), ServerConfig(port=0)) as server:
            return await asyncio.gather(
                stream_audio(uri(server), WAVE.numpy(), SAMPLE_RATE, realtime=False, hotwords=["abc:50"]),
                stream_audio(uri(server), WAVE.numpy(), SAMPLE_RATE, realtime=False,
                             hotwords=[{"phrase": "fgh", "score": 50}]),
                stream_audio(uri(server), WAVE.numpy(), SAMPLE_RATE, realtime=False))

    a, f, none = run(scenario())
    assert a.text == expected["abc"] and f.text == expected["fgh"] and none.text == plain
    assert "abc" in a.text and "fgh" in f.text


@pytest.mark.parametrize("hotwords, message", [
    (["a"] * 4, "too many hotwords: 4 phrases (limit 3 per request)"),
    (["abcdeabcdeabcde"], "hotword too long: 15 characters"),
    ([""], "empty hotword"),
    (["日本"], "cannot spell"),
    (["abc:-2"], "must be a finite number > 0"),
    ("abc", "hotwords must be a list"),
    ([{"phrase": "abc", "score": "high"}], "score must be a number"),
    ([7], "hotwords[0] must be a string"),
])
def test_bad_hotwords_get_a_failed_reply_and_the_others_go_on(model, tokenizer, hotwords, message):
    async def scenario():
        config = ServerConfig(port=0, max_hotwords=3, max_hotword_chars=10)
        async with AsrServer(recognizer(model, tokenizer), config) as server:
            good = asyncio.create_task(stream_audio(uri(server), WAVE.numpy(), SAMPLE_RATE, realtime=False,
                                                    hotwords=["abc"]))
            async with connect(uri(server)) as ws:
                await ws.send(json.dumps({"signal": "start", "hotwords": hotwords}))
                replies = await read_until_closed(ws)
                code = ws.close_code
            return replies, code, await good

    replies, code, good = run(scenario())
    assert code == 1008 and replies[-1].status == "failed" and message in replies[-1].message
    assert good.finals and good.close_code == 1000


def test_a_negative_unbiased_keep_is_refused_when_the_recognizer_is_built(model, tokenizer):
    # Not at the first stream with a list, long after the server said it was ready.
    with pytest.raises(ValueError, match="hotword_unbiased_keep"):
        recognizer(model, tokenizer, hotword_unbiased_keep=-1)
