"""A client slower than real time is served correctly (loopback)."""

import asyncio

import torch

from asr.data.features import SAMPLE_RATE
from asr.decode.options import DecodeOptions
from asr.serve.client import stream_audio
from asr.decode.endpoint import EndpointConfig
from asr.serve.multi_stream import MultiStreamRecognizer
from asr.serve.server import AsrServer, ServerConfig
from tests.serve.helpers import noise
from tests.serve.test_server import offline_text

torch.set_num_threads(1)
C, LEFT = 4, 2


def make_server(model, tokenizer, beam=3, **limits):
    rec = MultiStreamRecognizer(model, tokenizer, DecodeOptions(chunk_size=C, left_chunks=LEFT, beam=beam),
                                endpoint=EndpointConfig(enabled=False))
    return AsrServer(rec, ServerConfig(port=0, **limits))


def run(coro, timeout=90):
    return asyncio.run(asyncio.wait_for(coro, timeout=timeout))


def test_client_slower_than_real_time_gets_the_offline_final(model, tokenizer):
    wave = noise(1.0, 21, SAMPLE_RATE).numpy()

    async def scenario():
        async with make_server(model, tokenizer) as server:
            # Half real time, in pieces smaller than a chunk: the server waits for audio between chunks.
            return await stream_audio(f"ws://127.0.0.1:{server.port}", wave, SAMPLE_RATE, piece_s=0.05,
                                      realtime=True, speed=0.5)

    session = run(scenario())
    assert session.sent_at[-1][1] - session.sent_at[0][1] >= 0.9  # it really was slower than the audio (1 s)
    assert session.close_code == 1000 and len(session.finals) == 1
    assert session.text == offline_text(model, tokenizer, wave).text != ""
