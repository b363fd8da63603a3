"""MultiStreamRecognizer endpoints at frame resolution and endpoint resets, with a CTC head scripted in stream time.

The encoder is the tiny model's, so caches, CMN and chunking are real; only the CTC head is
replaced: it reads speech or silence from the stream frame of each encoder frame, so the
test decides where sentences are and can check where each utterance's words land.
"""

import copy

import pytest
import torch

from asr.data.features import SAMPLE_RATE, FbankExtractor
from asr.decode.options import DecodeOptions
from asr.serve.encoders import OnnxChunkEncoder
from asr.decode.endpoint import EndpointConfig
from asr.serve.export import EncoderStep, OnnxEncoderStep, export_onnx
from asr.serve.multi_stream import MultiStreamRecognizer
from tests.serve.helpers import noise

torch.set_num_threads(1)
C, LEFT = 4, 2
SPACE, A, B = 10, 2, 3  # the char tokenizer's "▁", "a", "b"
RESETS = ("none", "cache", "cmn", "both")


class ScriptedCtc:
    """CTC log-probs (1, c, V) from stream time: a speech range [a, b) reads "▁abab..." from frame a, else blank."""

    def __init__(self, speech: list[tuple[int, int]], vocab: int) -> None:
        self.speech = speech
        self.vocab = vocab
        self.stream = None  # set once the stream exists

    def token(self, t: int) -> int:
        for a, b in self.speech:
            if a <= t < b:
                return SPACE if t == a else (A if (t - a) % 2 else B)
        return 0

    def __call__(self, out: torch.Tensor) -> torch.Tensor:
        # The chunk's first frame: a whole chunk's new state replaces the stream's after this call; the
        # last partial chunk's flush has already moved the state's clock past its frames.
        flushed = getattr(self.stream.encoder_state, "finished", False)  # an ONNX state is never flushed in place
        first = self.stream._encoder_frame() - (out.size(1) if flushed else 0)
        lp = torch.full((1, out.size(1), self.vocab), -8.0)
        for i in range(out.size(1)):
            lp[0, i, self.token(first + i)] = -0.01
        return lp


def scripted(model, tokenizer, speech, reset, online_cmn=0.0, onnx_path=None, cmn_gate_db=0.0):
    clone = copy.deepcopy(model)
    clone.decoder = None  # finals are the CTC best path: the test reads its words
    clone.encoder.online_cmn_frames = online_cmn
    clone.encoder.online_cmn_gate_db = cmn_gate_db
    head = ScriptedCtc(speech, model.ctc_proj.out_features)
    clone.ctc_log_probs = head
    chunk_encoder = None
    if onnx_path is not None:
        chunk_encoder = OnnxChunkEncoder(OnnxEncoderStep(onnx_path), clone.encoder, C, LEFT)
    rec = MultiStreamRecognizer(clone, tokenizer, DecodeOptions(chunk_size=C, left_chunks=LEFT, beam=2),
                                endpoint=EndpointConfig(reset=reset), chunk_encoder=chunk_encoder)
    stream = rec.create_stream()
    head.stream = stream
    return rec, stream


def run(rec, stream, wave, piece=3200, on_endpoint=None):
    """Feed real-time pieces, reset at every endpoint; the finals."""
    finals = []

    def drain():
        while True:
            rec.decode()
            if not stream.is_endpoint():
                return
            finals.append(stream.result())
            if on_endpoint is not None:
                on_endpoint(stream)
            stream.reset()
            if on_endpoint is not None:
                on_endpoint(stream)

    for start in range(0, wave.numel(), piece):
        stream.accept_waveform(SAMPLE_RATE, wave[start : start + piece])
        drain()
    stream.finish()
    drain()
    assert stream.is_done()
    finals.append(stream.result())
    return finals


def samples_for(model, frames: int) -> int:
    """Samples of audio that give exactly ``frames`` encoder frames."""
    extractor = FbankExtractor()
    n = frames * 640
    while model.encoder.output_length(extractor.num_frames(n)) < frames:
        n += 160
    return n


# Sentence one in frames [2, 25); its 1 s of trailing silence ends at frame 49, inside the chunk of
# frames 48-51; sentence two starts at frame 51 of that chunk.
SPEECH = [(2, 25), (51, 71)]


@pytest.mark.parametrize("reset", RESETS)
def test_speech_in_the_endpoints_chunk_starts_the_next_utterance_at_its_stream_time(model, tokenizer, reset):
    rec, stream = scripted(model, tokenizer, SPEECH, reset)
    finals = run(rec, stream, noise(4.4, 3, SAMPLE_RATE))
    texts = [f.text for f in finals]
    assert texts[:2] == ["ab" * 11, "ab" * 9 + "a"]  # two sentences, neither one's onset in the other's final
    assert [f.segment for f in finals[:2]] == [0, 1]
    first, second = finals[0].words, finals[1].words
    assert first[0].start == pytest.approx(3 * rec.frame_s) and first[-1].end == pytest.approx(25 * rec.frame_s)
    # Stream time: the reset (and its rewind) did not move the second sentence.
    assert second[0].start == pytest.approx(52 * rec.frame_s) and second[-1].end == pytest.approx(71 * rec.frame_s)
    # The first utterance ends at the split point, where the second begins.
    assert finals[0].span == pytest.approx((0.0, 50 * rec.frame_s)) and finals[1].span[0] == pytest.approx(2.0)


def utterances(rec, stream, wave):
    """Run the stream; the encoder frames (T', D) of each utterance that ended at an endpoint, and the
    encoder state each next utterance started from."""
    frames, states = [], []

    def look(stream):
        if stream.is_endpoint():
            frames.append(torch.cat(stream._utt.enc_out))
        else:
            states.append(copy.deepcopy(stream.encoder_state))

    run(rec, stream, wave, on_endpoint=look)
    return frames, states


def encoded(model, feats):
    """(T', D) the encoder's chunked forward over (T, F) frames, as a stream that starts with them."""
    with torch.no_grad():
        out, _ = model.encoder(feats[None], torch.tensor([feats.size(0)]), chunk_size=C, left_chunks=LEFT)
    return out[0]


def test_cache_reset_encodes_the_next_utterance_from_a_fresh_state(model, tokenizer):
    rec, stream = scripted(model, tokenizer, SPEECH, "cache")
    wave = noise(4.4, 3, SAMPLE_RATE)
    frames, states = utterances(rec, stream, wave)
    assert states[0].time == 0 and all(layer.key is None and layer.conv is None for layer in states[0].layers)
    # Sentence two's encoder frames are those of an encoder that starts at its split point (frame 50).
    want = encoded(model, FbankExtractor()(wave)[50 * 4 :])
    assert torch.allclose(frames[1], want[: frames[1].size(0)], atol=1e-4)


def test_without_a_cache_reset_the_next_utterance_continues_the_encoder(model, tokenizer):
    rec, stream = scripted(model, tokenizer, SPEECH, "none")
    wave = noise(4.4, 3, SAMPLE_RATE)
    frames, states = utterances(rec, stream, wave)
    assert states[0].time == 52  # the chunk of frames 48-51 was encoded once, frames 50-51 carried over
    whole = encoded(model, FbankExtractor()(wave))
    assert torch.allclose(frames[1], whole[50 : 50 + frames[1].size(0)], atol=1e-4)


def test_both_resets_normalize_and_encode_the_next_utterance_as_a_fresh_stream(model, tokenizer):
    """The encoder and the running mean start at the split point, as for a stream that starts there."""
    rec, stream = scripted(model, tokenizer, SPEECH, "both", online_cmn=20.0)
    wave = noise(4.4, 3, SAMPLE_RATE) * torch.linspace(0.2, 3.0, int(4.4 * SAMPLE_RATE))  # a moving mean
    frames, _ = utterances(rec, stream, wave)
    want = encoded(rec.model, FbankExtractor()(wave)[50 * 4 :])  # forward applies online CMN from its first frame
    assert torch.allclose(frames[1], want[: frames[1].size(0)], atol=1e-4)
    carried_on = encoded(rec.model, FbankExtractor()(wave))[50:]
    assert not torch.allclose(frames[1], carried_on[: frames[1].size(0)], atol=1e-3)  # the reset mattered


@pytest.mark.parametrize("gate_db", [0.0, 10.0])
@pytest.mark.parametrize("reset", ["cmn", "none"])
def test_cmn_reset_restarts_the_running_sums_at_the_endpoint(model, tokenizer, reset, gate_db):
    seen = []

    def look(stream):
        if not stream.is_endpoint():  # just after reset()
            seen.append((copy.deepcopy(stream._frontend._norm.state), stream._queue._raw, len(stream._queue)))

    rec, stream = scripted(model, tokenizer, SPEECH, reset, online_cmn=20.0, cmn_gate_db=gate_db)
    run(rec, stream, noise(4.4, 3, SAMPLE_RATE), on_endpoint=look)
    state, raw, queued = seen[0]
    if reset == "cmn":  # the sums hold the frames waiting for the encoder, as a fresh stream's would
        fresh = rec.model.encoder.online_cmn().stream()
        fresh.push(raw)
        assert torch.equal(state.count, fresh.state.count) and torch.allclose(state.sums, fresh.state.sums)
    else:  # the frames before the endpoint still count
        assert float(state.count) > queued


@pytest.mark.parametrize("reset", RESETS)
def test_an_endpoint_in_the_last_partial_chunk_still_gives_both_sentences(model, tokenizer, reset):
    # 55 frames: whole chunks end at frame 51; 1 s of silence after frame 27 ends at frame 52, in the
    # flushed partial chunk (frames 52-54), where sentence two starts at frame 53.
    rec, stream = scripted(model, tokenizer, [(2, 28), (53, 60)], reset)
    finals = run(rec, stream, noise(samples_for(model, 55) / SAMPLE_RATE, 4, SAMPLE_RATE))
    assert [f.text for f in finals] == ["ab" * 12 + "a", "a"]
    assert finals[1].words[0].start == pytest.approx(54 * rec.frame_s)


@pytest.mark.slow  # the export alone takes 10-20 s
def test_the_onnx_backend_restarts_and_carries_over_as_the_eager_one(model, tokenizer, tmp_path):
    pytest.importorskip("onnxscript", reason="pip install -e '.[export]'")
    onnx_path = export_onnx(EncoderStep(model.encoder, C, LEFT), tmp_path / "step.onnx")
    wave = noise(4.4, 3, SAMPLE_RATE)
    for reset in ("none", "both"):
        runs = []
        for path in (None, onnx_path):
            rec, stream = scripted(model, tokenizer, SPEECH, reset, online_cmn=20.0, onnx_path=path)
            runs.append(utterances(rec, stream, wave)[0])
        eager, onnx = runs
        assert len(eager) == len(onnx) >= 2
        assert all(torch.allclose(a, b, atol=1e-4) for a, b in zip(eager, onnx))
