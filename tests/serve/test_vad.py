"""The VAD in front of the recognizers: segmentation with hysteresis on scripted probabilities, Silero on
silence and speech, and what the recognizers do with it (silence costs nothing, times stay in stream time)."""

import time

import numpy as np
import pytest
import torch
import torchaudio

from asr.data.features import SAMPLE_RATE, FbankExtractor
from asr.decode.options import DecodeOptions
from asr.serve.multi_stream import MultiStreamRecognizer
from asr.streaming.recognizer import StreamingRecognizer
from asr.streaming.vad import SileroVad, Speech, SpeechEnd, SpeechSegmenter, VadConfig

torch.set_num_threads(1)
W = 512  # samples per VAD window


class ScriptedVad:
    """Speech probabilities given per window (0 after the script), in place of the model."""

    window = W

    def __init__(self, probs: list[float]) -> None:
        self.script = probs

    def init_state(self) -> int:
        return 0  # windows seen

    def probs(self, samples: np.ndarray, state: int) -> tuple[list[float], int]:
        k = samples.size // W
        return [self.script[i] if i < len(self.script) else 0.0 for i in range(state, state + k)], state + k


# min_speech 2 windows, min_silence 3 windows, pad 1 window, release under 0.35
CONFIG = VadConfig(threshold=0.5, min_speech_s=2 * W / SAMPLE_RATE, min_silence_s=3 * W / SAMPLE_RATE,
                   pad_s=W / SAMPLE_RATE)
#        w0   w1   w2   w3 onset      w6: between the thresholds   w7-w9 silent: end   w11: a burst, dropped
SCRIPT = [0.0, 0.0, 0.0, 0.9, 0.9, 0.9, 0.4, 0.1, 0.1, 0.1, 0.0, 0.9, 0.1, 0.0, 0.0]


def feed(segmenter, audio, piece):
    events = []
    for start in range(0, audio.numel(), piece):
        events += segmenter.accept(audio[start : start + piece])
    return joined(events + segmenter.finish())


def joined(events):
    """Adjacent speech pieces as one, so event lists from different piece sizes compare."""
    out = []
    for e in events:
        if out and isinstance(e, Speech) and isinstance(out[-1], Speech):
            out[-1] = Speech(out[-1].start, torch.cat([out[-1].samples, e.samples]))
        else:
            out.append(e)
    return out


@pytest.mark.parametrize("piece", [300, W, 4000, 20 * W])
def test_segments_start_a_pad_before_the_onset_and_end_after_the_silence(piece):
    audio = torch.arange(len(SCRIPT) * W + 100, dtype=torch.float32)  # each sample says where it is
    events = feed(SpeechSegmenter(ScriptedVad(SCRIPT), CONFIG), audio, piece)
    assert len(events) == 2 and isinstance(events[0], Speech) and isinstance(events[1], SpeechEnd)
    speech = events[0]
    assert speech.start == 2 * W and events[1].end == 10 * W  # pad before w3; w7-w9 of silence kept
    assert torch.equal(speech.samples, audio[2 * W : 10 * W])  # every sample once, in order


def test_a_segment_open_at_the_end_keeps_its_last_samples():
    audio = torch.arange(5 * W + 100, dtype=torch.float32)
    events = feed(SpeechSegmenter(ScriptedVad([0.0, 0.9, 0.9, 0.9, 0.9]), CONFIG), audio, 700)
    assert len(events) == 1 and events[0].start == 0 and torch.equal(events[0].samples, audio)


def test_speech_cut_short_by_the_end_of_the_audio_is_kept():
    audio = torch.arange(3 * W + 10, dtype=torch.float32)
    events = feed(SpeechSegmenter(ScriptedVad([0.0, 0.0, 0.9]), CONFIG), audio, W)
    assert len(events) == 1 and events[0].start == W and torch.equal(events[0].samples, audio[W:])


def test_bad_settings_are_rejected():
    with pytest.raises(ValueError, match="threshold"):
        VadConfig(threshold=1.0)
    with pytest.raises(ValueError, match="min_silence_s"):
        VadConfig(min_silence_s=0.0)


def espeak(text: str) -> torch.Tensor:
    from asr.synth.espeak import EspeakSynthesizer

    synth = EspeakSynthesizer()
    wave = synth.synthesize(text, "en-us+m3", 175, 50, seed=3)
    return torchaudio.functional.resample(torch.from_numpy(wave / 32768.0).float(), synth.sample_rate, SAMPLE_RATE)


@pytest.fixture(scope="module")
def silero():
    return SileroVad()


@pytest.fixture(scope="module")
def sentence():
    return espeak("the cat sat on the mat today")


def silence(seconds: float, dbfs: float | None = None) -> torch.Tensor:
    n = round(seconds * SAMPLE_RATE)
    if dbfs is None:
        return torch.zeros(n)
    return 10 ** (dbfs / 20) * torch.randn(n, generator=torch.Generator().manual_seed(0))


def test_silero_finds_no_speech_in_silence_and_one_segment_around_a_sentence(silero, sentence):
    for quiet in (silence(5.0), silence(5.0, -60.0)):
        assert feed(SpeechSegmenter(silero, VadConfig()), quiet, 3200) == []
    audio = torch.cat([silence(2.0), sentence, silence(1.5)])
    events = feed(SpeechSegmenter(silero, VadConfig()), audio, 3200)
    assert [type(e) for e in events] == [Speech, SpeechEnd]
    # The sentence's audio lies inside the segment, which starts a little before it.
    voiced = (sentence.abs() > 0.01).nonzero()
    onset, offset = 2 * SAMPLE_RATE + int(voiced[0]), 2 * SAMPLE_RATE + int(voiced[-1])
    assert onset - 0.6 * SAMPLE_RATE <= events[0].start <= onset and events[1].end > offset
    # Deterministic, and the same whatever the piece size.
    assert_same(events, feed(SpeechSegmenter(silero, VadConfig()), audio, 1234))


def assert_same(a, b):
    assert [type(e) for e in a] == [type(e) for e in b]
    for x, y in zip(a, b):
        if isinstance(x, Speech):
            assert x.start == y.start and torch.equal(x.samples, y.samples)
        else:
            assert x == y


@pytest.mark.parametrize("dbfs", [None, -60.0])
def test_a_silent_stream_produces_no_tokens_and_costs_little_with_the_vad(model, tokenizer, dbfs):
    rec = MultiStreamRecognizer(model, tokenizer, DecodeOptions(chunk_size=4, left_chunks=2), vad=VadConfig())
    stream = rec.create_stream()
    audio = silence(60.0, dbfs)
    start = time.process_time()
    for i in range(0, audio.numel(), 1600):
        stream.accept_waveform(SAMPLE_RATE, audio[i : i + 1600])
        rec.decode()
        assert not stream.is_endpoint() and stream.result().text == ""
    stream.finish()
    rec.decode()
    cpu = time.process_time() - start
    assert stream.is_done() and stream.result().text == "" and stream.result().hyps[0].tokens == ()
    assert rec.batch_sizes.steps == 0 and stream._vad.windows == audio.numel() // W  # the encoder never ran
    assert cpu < 3.0, f"{cpu:.2f} s of CPU for 60 s of silence"


def test_vad_segments_decode_with_word_times_in_stream_time(model, tokenizer, sentence):
    audio = torch.cat([silence(2.0), sentence, silence(1.5), sentence, silence(1.0)])
    segments = feed(SpeechSegmenter(SileroVad(), VadConfig()), audio, 3200)
    bounds = [(s.start / SAMPLE_RATE, (s.start + s.samples.numel()) / SAMPLE_RATE)
              for s in segments if isinstance(s, Speech)]
    assert len(bounds) == 2
    rec = MultiStreamRecognizer(model, tokenizer, DecodeOptions(chunk_size=4, left_chunks=2), vad=VadConfig())
    stream = rec.create_stream()
    finals = []
    for i in range(0, audio.numel(), 3200):
        stream.accept_waveform(SAMPLE_RATE, audio[i : i + 3200])
        rec.decode()
        while stream.is_endpoint():
            finals.append(stream.result())
            stream.reset()
            rec.decode()
    stream.finish()
    rec.decode()
    finals.append(stream.result())
    assert stream.is_done() and [f.segment for f in finals] == [0, 1, 2] and finals[2].text == ""
    for final, (start, end) in zip(finals, bounds):
        assert final.words, "the tiny model emits tokens on speech"
        assert all(start - 1e-6 <= w.start < w.end <= end + 1e-6 for w in final.words)
        # The utterance's span is its segment's audio, in stream time too.
        assert final.span[0] == pytest.approx(start) and start < final.span[1] <= end + 1e-6


def test_single_stream_api_drops_leading_silence(model, tokenizer, sentence):
    """Speech after silence decodes exactly as after less silence: only the pad before the onset is kept."""
    rec = StreamingRecognizer(model, tokenizer, DecodeOptions(chunk_size=4, left_chunks=2, beam=3), vad=VadConfig())
    results = []
    for lead in (64 * W, 32 * W):  # whole windows, so the VAD sees the same speech windows
        audio = torch.cat([torch.zeros(lead), sentence, silence(1.0)])
        rec.reset()
        for i in range(0, audio.numel(), 3200):
            rec.accept_waveform(audio[i : i + 3200])
        results.append((rec.finalize(), rec.encoder_output()))
    (text, enc), (text2, enc2) = results
    # The same frames; the feed's pieces fall differently on them, so chunks may be batched differently.
    assert text == text2 and enc.shape == enc2.shape and torch.allclose(enc, enc2, atol=1e-5)
    # Fewer frames than the sentence and its silences would give: the lead-in did not reach the encoder.
    whole = FbankExtractor().num_frames(64 * W + sentence.numel() + SAMPLE_RATE)
    assert enc.size(1) < model.encoder.output_length(whole) - 40
    rec.reset()
    rec.accept_waveform(silence(10.0))
    assert rec.finalize() == "" and rec.encoder_output().size(1) == 0


def test_server_sessions_with_the_vad_give_one_final_per_sentence(model, tokenizer, sentence):
    """Continuous decoding over the WebSocket protocol: each sentence's final as the recognizer alone gives it."""
    import asyncio

    from asr.serve.client import stream_audio
    from asr.decode.endpoint import EndpointConfig
    from asr.serve.server import AsrServer, ServerConfig

    audio = torch.cat([silence(2.0), sentence, silence(1.5), sentence, silence(1.0)])

    def recognizer():
        return MultiStreamRecognizer(model, tokenizer, DecodeOptions(chunk_size=4, left_chunks=2), vad=VadConfig(),
                                     endpoint=EndpointConfig(reset="both"))

    async def scenario():
        async with AsrServer(recognizer(), ServerConfig(port=0)) as server:
            return await stream_audio(f"ws://127.0.0.1:{server.port}", audio.numpy(), SAMPLE_RATE, piece_s=0.1,
                                      realtime=False, continuous_decoding=True)

    session = asyncio.run(asyncio.wait_for(scenario(), timeout=60))
    rec = recognizer()
    stream = rec.create_stream()
    stream.accept_waveform(SAMPLE_RATE, audio)
    stream.finish()
    alone = []
    while not stream.is_done():
        rec.decode()
        if stream.is_endpoint() or stream.is_done():
            alone.append(stream.result().text)
            if not stream.is_done():
                stream.reset()
    # A last empty final comes when the end of the audio is read after the second segment's final was out.
    said = [r.nbest[0]["sentence"] for r in session.finals]
    assert [s for s in said if s] == alone and len(alone) == 2 and said[:2] == alone
    assert session.replies[-1].type == "speech_end" and session.close_code == 1000
