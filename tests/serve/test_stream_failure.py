"""One stream failing (an abs_learned model past its position table) fails alone; the others are served."""

import asyncio

import pytest
import torch

from asr.data.features import SAMPLE_RATE
from asr.decode.options import DecodeOptions
from asr.serve.client import stream_audio
from asr.decode.endpoint import EndpointConfig
from asr.serve.multi_stream import MultiStreamRecognizer
from asr.serve.server import AsrServer, ServerConfig
from tests.serve.helpers import noise, tiny_model

torch.set_num_threads(1)
C, LEFT = 4, 2
MAX_LEN = 40  # encoder frames of the learned table: 1.6 s at 40 ms a frame
NO_ENDPOINT = EndpointConfig(enabled=False)


@pytest.fixture(scope="module")
def short_table_model(tokenizer):
    return tiny_model(tokenizer, "abs_learned", max_len=MAX_LEN)


def recognizer(model, tokenizer):
    return MultiStreamRecognizer(model, tokenizer, DecodeOptions(chunk_size=C, left_chunks=LEFT, beam=3),
                                 endpoint=NO_ENDPOINT)


def decode_alone(model, tokenizer, wave):
    rec = recognizer(model, tokenizer)
    stream = rec.create_stream()
    stream.accept_waveform(SAMPLE_RATE, wave)
    stream.finish()
    rec.decode()
    return stream


def test_a_failing_stream_leaves_the_others_of_its_batch_alone(short_table_model, tokenizer):
    rec = recognizer(short_table_model, tokenizer)
    long_wave, short_wave = noise(3.0, 1, SAMPLE_RATE), noise(1.2, 2, SAMPLE_RATE)
    piece = SAMPLE_RATE // 10
    long, short = rec.create_stream(), rec.create_stream()
    short_joins = 8  # round (0.1 s of audio each) at which the short stream starts: both run batched
    failed_in_round = None
    for round_ in range(100):
        if long.error is None and round_ * piece < long_wave.numel():
            long.accept_waveform(SAMPLE_RATE, long_wave[round_ * piece : (round_ + 1) * piece])
        at = (round_ - short_joins) * piece
        if 0 <= at < short_wave.numel():
            short.accept_waveform(SAMPLE_RATE, short_wave[at : at + piece])
            if at + piece >= short_wave.numel():
                short.finish()
        before = rec.batch_sizes.counts.copy()
        rec.decode()
        if long.error is not None and failed_in_round is None:
            failed_in_round = round_
            # The failing round still decoded the short stream (rerun alone after the batch of two raised).
            assert short.new_frames > 0 and not short.is_done()
            assert rec.batch_sizes.counts - before == {1: 1}
        if short.is_done() and long.error is not None:
            break
    assert failed_in_round is not None and failed_in_round < short_joins + 12
    assert long.error.startswith("TooLongForTable") and f"max_len={MAX_LEN}" in long.error
    assert long._feats is None and not long.has_chunk()  # nothing more is kept or decoded for it
    with pytest.raises(ValueError, match="this stream failed"):
        long.accept_waveform(SAMPLE_RATE, short_wave)
    assert rec.batch_sizes.counts[2] > 0  # the two streams did share batched steps before the failure

    alone = decode_alone(short_table_model, tokenizer, short_wave)
    assert short.error is None and short.is_done()
    assert short.result().text == alone.result().text != ""
    assert torch.allclose(torch.cat(short._utt.log_probs), torch.cat(alone._utt.log_probs), atol=1e-5)


def test_server_fails_one_connection_and_serves_the_other(short_table_model, tokenizer):
    long_wave, short_wave = noise(3.0, 1, SAMPLE_RATE).numpy(), noise(1.2, 2, SAMPLE_RATE).numpy()

    async def scenario():
        server = AsrServer(recognizer(short_table_model, tokenizer), ServerConfig(port=0))
        async with server:
            uri = f"ws://127.0.0.1:{server.port}"

            async def late_short():
                await asyncio.sleep(0.8)  # still streaming when the long one passes 1.6 s
                return await stream_audio(uri, short_wave, SAMPLE_RATE, piece_s=0.1, realtime=True)

            long, short = await asyncio.gather(
                stream_audio(uri, long_wave, SAMPLE_RATE, piece_s=0.1, realtime=True), late_short()
            )
            after = await stream_audio(uri, short_wave, SAMPLE_RATE, piece_s=0.1, realtime=False)
            for _ in range(100):  # the handlers remove their streams just after the close
                if not server.recognizer.streams:
                    break
                await asyncio.sleep(0.02)
            return long, short, after, list(server.recognizer.streams)

    long, short, after, streams_left = asyncio.run(asyncio.wait_for(scenario(), timeout=60))
    failures = [r for r in long.replies if r.status == "failed"]
    assert len(failures) == 1 and failures[0] is long.replies[-1]
    assert failures[0].message.startswith("recognition failed: TooLongForTable") and "max_len=40" in failures[0].message
    assert long.close_code == 1011 and not long.finals
    want = decode_alone(short_table_model, tokenizer, short_wave).result().text
    assert want != ""
    for session in (short, after):
        assert session.close_code == 1000 and [r.nbest[0]["sentence"] for r in session.finals] == [want]
    assert streams_left == []
