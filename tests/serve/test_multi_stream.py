"""MultiStreamRecognizer: interleaved streams equal each stream decoded alone; endpoints; continuous decoding."""

import copy

import pytest
import torch

from asr.data.features import SAMPLE_RATE, FbankExtractor
from asr.decode.ctc_prefix_beam import ctc_prefix_beam_search
from asr.decode.options import DecodeOptions
from asr.decode.endpoint import EndpointConfig, EndpointRule
from asr.serve.multi_stream import MultiStreamRecognizer
from asr.streaming.recognizer import StreamingRecognizer
from tests.serve.helpers import noise

torch.set_num_threads(1)
C, LEFT = 4, 2
NO_ENDPOINT = EndpointConfig(enabled=False)


def pieces(wave: torch.Tensor, seed: int):
    g = torch.Generator().manual_seed(seed)
    start = 0
    while start < wave.numel():
        n = int(torch.randint(2000, 8000, (1,), generator=g))
        yield wave[start : start + n]
        start += n


def serve_whole(rec: MultiStreamRecognizer, waves: list[torch.Tensor]) -> list:
    """One stream per wave, each sent in random pieces and finished, decoded until every stream is done."""
    streams = [rec.create_stream() for _ in waves]
    for i, (wave, stream) in enumerate(zip(waves, streams)):
        for piece in pieces(wave, i):
            stream.accept_waveform(SAMPLE_RATE, piece)
        stream.finish()
    for _ in range(200):
        rec.decode()
        if all(s.is_done() for s in streams):
            break
    assert all(s.is_done() for s in streams)
    return streams


def test_interleaved_streams_equal_each_stream_alone(model, tokenizer):
    rec = MultiStreamRecognizer(model, tokenizer, DecodeOptions(chunk_size=C, left_chunks=LEFT, beam=3),
                                endpoint=NO_ENDPOINT)
    waves = [noise(s, seed, SAMPLE_RATE) for seed, s in enumerate([2.0, 1.3, 2.6])]
    feeds = [list(pieces(w, i)) for i, w in enumerate(waves)]
    streams = [rec.create_stream() for _ in waves]
    joins = [0, 3, 5]  # rounds at which each stream starts sending
    for round_ in range(200):
        for i, stream in enumerate(streams):
            if round_ >= joins[i] and feeds[i]:
                stream.accept_waveform(SAMPLE_RATE, feeds[i].pop(0))
                if not feeds[i]:
                    stream.finish()
        rec.decode()
        if all(s.is_done() for s in streams):
            break
    assert all(s.is_done() for s in streams)
    assert rec.batch_sizes.largest == len(streams)
    extractor = FbankExtractor()
    for wave, stream in zip(waves, streams):
        feats = extractor(wave)[None]  # (1, T, F)
        enc, _ = model.encoder(feats, torch.tensor([feats.size(1)]), chunk_size=C, left_chunks=LEFT)
        full_lp = model.ctc_log_probs(enc)[0]  # (T', V)
        got_lp = torch.cat(stream._utt.log_probs)
        assert got_lp.shape == full_lp.shape
        assert torch.allclose(got_lp, full_lp, atol=1e-4)
        # The same text as the single-stream recognizer (same beam and rescoring weights).
        alone = StreamingRecognizer(model, tokenizer,
                                    DecodeOptions(chunk_size=C, left_chunks=LEFT, beam=3, ctc_weight=0.5))
        alone.accept_waveform(wave)
        result = stream.result()
        assert result.is_final and result.text == alone.finalize()
        assert list(result.hyps[0].tokens) == alone.final_tokens
        assert result.text  # the random model does emit tokens, so the comparison meant something


def test_a_stream_with_centred_frames_gets_its_last_frames_at_the_end(model, tokenizer):
    """snip_edges=False (sherpa-onnx's fbank): the frames that wait for the end of the audio can
    complete whole chunks; finish() hands them over and the stream equals the whole utterance."""
    from asr.data.features import FeatureConfig

    centred = FeatureConfig(snip_edges=False, high_freq=-400.0)
    rec = MultiStreamRecognizer(model, tokenizer, DecodeOptions(chunk_size=C, left_chunks=LEFT, beam=3),
                                endpoint=NO_ENDPOINT, features=centred)
    wave = noise(1.93, 3, SAMPLE_RATE)
    stream = rec.create_stream()
    for piece in pieces(wave, 3):
        stream.accept_waveform(SAMPLE_RATE, piece)
        rec.decode()
    stream.finish()
    while not stream.is_done():
        rec.decode()
    feats = FbankExtractor(centred)(wave)[None]  # (1, T, F)
    enc, _ = model.encoder(feats, torch.tensor([feats.size(1)]), chunk_size=C, left_chunks=LEFT)
    assert torch.allclose(torch.cat(stream._utt.log_probs), model.ctc_log_probs(enc)[0], atol=1e-4)
    alone = StreamingRecognizer(model, tokenizer, DecodeOptions(chunk_size=C, left_chunks=LEFT, beam=3, ctc_weight=0.5),
                                features=centred)
    alone.accept_waveform(wave)
    assert stream.result().text == alone.finalize()


def test_final_words_come_from_the_alignment(model, tokenizer):
    rec = MultiStreamRecognizer(model, tokenizer, DecodeOptions(chunk_size=C, left_chunks=LEFT, beam=3),
                                endpoint=NO_ENDPOINT)
    stream = rec.create_stream()
    stream.accept_waveform(SAMPLE_RATE, noise(2.0, 7, SAMPLE_RATE))
    stream.finish()
    rec.decode()
    result = stream.result(nbest=2)
    assert result.is_final and len(result.hyps) == 2
    words = result.words
    assert "".join(w.word for w in words) == result.text.replace(" ", "")
    assert all(0.0 <= w.start < w.end <= 2.0 for w in words)
    assert all(a.end <= b.start for a, b in zip(words, words[1:]))
    # A word ends on an encoder-frame boundary (40 ms frames for 4x subsampling of 10 ms frames).
    assert all(abs(w.end / rec.frame_s - round(w.end / rec.frame_s)) < 1e-6 for w in words)
    # Partials carry no word times; the best partial is the CTC prefix-beam best.
    partial = rec.create_stream()
    partial.accept_waveform(SAMPLE_RATE, noise(1.0, 7, SAMPLE_RATE))
    rec.decode()
    lp = torch.cat(partial._utt.log_probs)
    assert not partial.result().is_final and partial.result().words == ()
    assert list(partial.result().hyps[0].tokens) == ctc_prefix_beam_search(lp, 3, model.blank_id)[0][0]


def biased(model, blank_logit: float):
    """A copy of the model whose CTC head always (+) or never (-) prefers blank."""
    clone = copy.deepcopy(model)
    with torch.no_grad():
        clone.ctc_proj.bias[model.blank_id] += blank_logit
    return clone


def run(rec, stream, wave, piece=3200):
    """Feed real-time pieces; reset at every endpoint (continuous decoding); return the final results."""
    finals = []
    for start in range(0, wave.numel(), piece):
        stream.accept_waveform(SAMPLE_RATE, wave[start : start + piece])
        while True:
            rec.decode()
            if not stream.is_endpoint():
                break
            finals.append(stream.result())
            stream.reset()
    stream.finish()
    rec.decode()
    finals.append(stream.result())
    return finals


def test_no_speech_endpoints_every_five_seconds(model, tokenizer):
    rec = MultiStreamRecognizer(biased(model, 100.0), tokenizer, DecodeOptions(chunk_size=C, left_chunks=LEFT))
    finals = run(rec, rec.create_stream(), noise(12.0, 1, SAMPLE_RATE))
    assert [f.segment for f in finals] == [0, 1, 2]
    assert all(f.is_final and f.text == "" for f in finals)


def test_max_utterance_rule_splits_continuous_speech(model, tokenizer):
    endpoint = EndpointConfig(rules=(EndpointRule(must_contain_speech=True, min_trailing_silence_s=0.0,
                                                  min_utterance_s=2.0),))
    rec = MultiStreamRecognizer(biased(model, -100.0), tokenizer, DecodeOptions(chunk_size=C, left_chunks=LEFT),
                                endpoint=endpoint)
    stream = rec.create_stream()
    finals = run(rec, stream, noise(5.0, 2, SAMPLE_RATE))
    assert [f.segment for f in finals] == [0, 1, 2]
    # Chunks of 4 frames = 0.16 s: each segment ends at the first chunk border at or past 2 s.
    first, second = finals[0].words, finals[1].words
    assert first and second
    assert first[-1].end <= 2.08 + 1e-6 and second[0].start >= 2.08 - 1e-6 and second[-1].end <= 4.16 + 1e-6
    # The encoder state went on: 5 s of audio gave all its frames, bounded memory.
    assert stream.encoder_state.time == model.encoder.output_length(FbankExtractor().num_frames(5 * SAMPLE_RATE))
    assert max(layer.cached_frames for layer in stream.encoder_state.layers) <= LEFT * C


def test_bad_input_is_rejected(model, tokenizer):
    rec = MultiStreamRecognizer(model, tokenizer, DecodeOptions(chunk_size=C, left_chunks=LEFT))
    stream = rec.create_stream()
    with pytest.raises(ValueError, match="sample_rate"):
        stream.accept_waveform(SAMPLE_RATE // 2, torch.zeros(10))
    with pytest.raises(ValueError, match="mono"):
        stream.accept_waveform(SAMPLE_RATE, torch.zeros(2, 10))
    stream.finish()
    with pytest.raises(ValueError, match="finish"):
        stream.accept_waveform(SAMPLE_RATE, torch.zeros(10))
    rec.decode()
    assert stream.is_done() and stream.result().text == ""
    with pytest.raises(ValueError, match="finished"):
        stream.reset()


def assert_serves_its_chunked_forward(changed, model, tokenizer, waves: list[torch.Tensor]) -> None:
    """``changed`` (a copy of ``model`` with one encoder setting changed) served by a MultiStreamRecognizer gives
    each stream the CTC log-probs of its own chunked forward, and not those of ``model``."""
    rec = MultiStreamRecognizer(changed, tokenizer, DecodeOptions(chunk_size=C, left_chunks=LEFT, beam=3),
                                endpoint=NO_ENDPOINT)
    streams = serve_whole(rec, waves)
    assert rec.batch_sizes.largest == len(streams)
    extractor = FbankExtractor()
    for wave, stream in zip(waves, streams):
        feats = extractor(wave)[None]  # (1, T, F)
        with torch.no_grad():
            enc, _ = changed.encoder(feats, torch.tensor([feats.size(1)]), chunk_size=C, left_chunks=LEFT)
            plain, _ = model.encoder(feats, torch.tensor([feats.size(1)]), chunk_size=C, left_chunks=LEFT)
        got = torch.cat(stream._utt.log_probs)
        assert got.shape == (enc.size(1), changed.vocab_size)
        assert torch.allclose(got, changed.ctc_log_probs(enc)[0], atol=1e-4)
        assert not torch.allclose(got, model.ctc_log_probs(plain)[0], atol=1e-3)  # the setting mattered


def test_online_cmn_model_serves_what_its_offline_forward_gives(model, tokenizer):
    """Each stream's frontend applies the running mean once per frame, though the chunks overlap."""
    cmn_model = copy.deepcopy(model)
    cmn_model.encoder.online_cmn_frames = 20.0
    assert_serves_its_chunked_forward(cmn_model, model, tokenizer,
                                      [noise(s, seed + 7, SAMPLE_RATE) for seed, s in enumerate([1.7, 2.2])])


def test_a_lookahead_model_serves_what_its_chunked_forward_gives(model, tokenizer):
    """Each step's span carries the chunk's lookahead frames; the state drops them, the next span brings them."""
    ahead = copy.deepcopy(model)
    ahead.encoder.chunk_lookahead = 3
    assert ahead.encoder.chunk_window(C) == model.encoder.chunk_window(C) + 3 * ahead.encoder.subsampling_rate
    assert_serves_its_chunked_forward(ahead, model, tokenizer,
                                      [noise(s, seed + 11, SAMPLE_RATE) for seed, s in enumerate([1.9, 1.2])])


def test_a_lookahead_model_with_online_cmn_serves_its_chunked_forward(model, tokenizer):
    """The running mean counts each frame once although a lookahead span overlaps the next one by more."""
    both = copy.deepcopy(model)
    both.encoder.chunk_lookahead = 2
    both.encoder.online_cmn_frames = 20.0
    assert_serves_its_chunked_forward(both, model, tokenizer,
                                      [noise(s, seed + 13, SAMPLE_RATE) for seed, s in enumerate([1.6, 2.1])])
