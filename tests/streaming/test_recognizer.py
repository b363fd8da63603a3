"""StreamingRecognizer: streaming CTC == chunk-masked full forward on the whole-utterance frames, rescoring."""

import pytest
import torch

from asr.data.features import FbankExtractor, FeatureConfig
from asr.decode import attention_rescoring, ctc_greedy, ctc_prefix_beam_search
from asr.decode.options import DecodeOptions
from asr.model import build_encoder
from asr.model.asr_model import AsrModel
from asr.streaming.recognizer import StreamingRecognizer

N_MELS, VOCAB, SOS = 40, 9, 8


# Both edge conventions: snipped windows (legacy) and centred, mirrored ones (sherpa-onnx's).
SNIPPED = FeatureConfig(num_mel_bins=N_MELS)
CENTRED = FeatureConfig(num_mel_bins=N_MELS, snip_edges=False, high_freq=-400.0)


class Tokens:
    def decode(self, ids):
        return " ".join(f"w{i}" for i in ids)


def pieces(wave: torch.Tensor, seed: int):
    """Cut audio into random pieces of 0..3000 samples."""
    g = torch.Generator().manual_seed(seed)
    start = 0
    while start < wave.numel():
        n = int(torch.randint(0, 3000, (1,), generator=g))
        yield wave[start : start + n]
        start += n


def make_model(pos_enc: str = "rel_xl", online_cmn_frames: float = 0.0, **scheme) -> AsrModel:
    torch.manual_seed(0)
    enc = build_encoder(pos_enc=pos_enc, **scheme, input_dim=N_MELS, d_model=32, num_heads=2, num_layers=2,
                        ffn_dim=64, conv_kernel=3, causal=True, subsampling=4, dropout=0.0,
                        online_cmn_frames=online_cmn_frames)
    enc.set_cmvn(torch.full((N_MELS,), 5.0), torch.full((N_MELS,), 0.3))
    return AsrModel(enc, VOCAB, SOS, decoder_layers=1, r2l_decoder_layers=1, decoder_heads=2, decoder_ffn_dim=64,
                    decoder_dropout=0.0, reverse_weight=0.3).eval()


@pytest.fixture(scope="module")
def model():
    return make_model()


def check_streaming_equals_full(model, seed, chunk_size, left_chunks, features=SNIPPED):
    g = torch.Generator().manual_seed(seed)
    wave = 0.1 * torch.randn(int(torch.randint(8000, 20000, (1,), generator=g)), generator=g)
    rec = StreamingRecognizer(model, Tokens(), DecodeOptions(chunk_size=chunk_size, left_chunks=left_chunks, beam=1),
                              features=features)
    for p in pieces(wave, seed):
        rec.accept_waveform(p)
    rec.finalize()
    feats = FbankExtractor(features)(wave)[None]  # (1, T, F)
    with torch.no_grad():
        enc, enc_lens = model.encode(feats, torch.tensor([feats.size(1)]), chunk_size, left_chunks)
        full = ctc_greedy(model.ctc_log_probs(enc), enc_lens)[0]
    assert torch.allclose(rec.encoder_output(), enc, atol=1e-4)
    assert rec.partial_tokens() == full
    assert len(full) > 0


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("chunk_size,left_chunks", [(2, 1), (4, -1)])
def test_streaming_ctc_greedy_equals_full_forward_under_the_chunk_mask(model, seed, chunk_size, left_chunks):
    check_streaming_equals_full(model, seed, chunk_size, left_chunks)


@pytest.mark.parametrize("seed", range(2))
def test_streaming_equals_full_forward_with_centred_frames(model, seed):
    """snip_edges=False: the last frames wait for finalize(), then the stream is the whole utterance."""
    check_streaming_equals_full(model, seed, 2, 1, CENTRED)


@pytest.mark.parametrize("pos_enc,scheme", [("shaw", {"max_distance": 4}), ("rel_bias", {"max_distance": 4}),
                                            ("abs_sin", {}), ("rope", {}), ("none", {})])
def test_streaming_equals_full_forward_for_other_position_schemes(pos_enc, scheme):
    check_streaming_equals_full(make_model(pos_enc, **scheme), 3, 3, 1)


@pytest.mark.parametrize("pos_enc,scheme", [("rel_xl", {}), ("abs_sin", {})])
@pytest.mark.parametrize("seed", range(2))
def test_streaming_with_online_cmn_equals_full_forward(pos_enc, scheme, seed):
    """The frontend's frame-by-frame running mean is what forward() does to the whole utterance."""
    cmn_model = make_model(pos_enc, online_cmn_frames=30.0, **scheme)
    check_streaming_equals_full(cmn_model, seed, 2, 1, (SNIPPED, CENTRED)[seed])
    # and it is applied: the same weights without it encode the same audio differently
    plain = make_model(pos_enc, **scheme)
    feats = FbankExtractor(SNIPPED)(0.1 * torch.randn(9000, generator=torch.Generator().manual_seed(seed)))[None]
    lens = torch.tensor([feats.size(1)])
    with torch.no_grad():
        assert (cmn_model.encode(feats, lens)[0] - plain.encode(feats, lens)[0]).abs().max() > 1e-2


def test_finalize_rescores_the_nbest_and_records_timings(model):
    wave = 0.1 * torch.randn(12000, generator=torch.Generator().manual_seed(5))
    rec = StreamingRecognizer(model, Tokens(), DecodeOptions(2, 2, beam=4, ctc_weight=0.5, reverse_weight=0.3),
                              features=SNIPPED)
    n_calls = 0
    for start in range(0, 12000, 1600):
        partial = rec.accept_waveform(wave[start : start + 1600].numpy())
        assert partial == Tokens().decode(rec.partial_tokens())
        n_calls += 1
    text = rec.finalize()
    enc = rec.encoder_output()
    with torch.no_grad():
        nbest = ctc_prefix_beam_search(model.ctc_log_probs(enc)[0], 4)
        expected = attention_rescoring(model, enc, enc.size(1), nbest, 0.5, 0.3)
    assert text == Tokens().decode(expected) and rec.finalize() == text
    assert len(rec.timings) == n_calls + 1
    assert sum(t.samples for t in rec.timings) == 12000 == rec.samples_seen
    assert sum(t.enc_frames for t in rec.timings) == enc.size(1)
    assert all(t.seconds >= 0 for t in rec.timings)
    with pytest.raises(ValueError, match="reset"):
        rec.accept_waveform(wave[:100])
    rec.reset()
    assert rec.accept_waveform(wave[:100]) == "" and rec.encoder_output().size(1) == 0


def test_bad_input_raises(model):
    with pytest.raises(ValueError, match=r"chunk_size \(0\)"):
        StreamingRecognizer(model, Tokens(), DecodeOptions(chunk_size=0, left_chunks=1), features=SNIPPED)
    ctc_att = AsrModel(model.encoder, VOCAB, SOS, decoder_layers=1, decoder_heads=2, decoder_ffn_dim=64)
    with pytest.raises(ValueError, match=r"reverse_weight \(0.5\)"):
        StreamingRecognizer(ctc_att, Tokens(), DecodeOptions(chunk_size=2, left_chunks=1, reverse_weight=0.5),
                            features=SNIPPED)
    rec = StreamingRecognizer(model, Tokens(), DecodeOptions(chunk_size=2, left_chunks=1), features=SNIPPED)
    with pytest.raises(ValueError, match=r"1-D"):
        rec.accept_waveform(torch.zeros(2, 100))


def test_fusion_reaches_the_beam_and_the_rescoring(model):
    """With a token LM the recognizer's final text is the building blocks' with the same fusion."""
    from asr.lm import ShallowFusion
    from asr.lm.ngram import train_kneser_ney

    # an LM over the model's ids 1..7 (blank 0 never predicted, <sos/eos> 8 ends sentences) that likes 1 2 3
    lm = train_kneser_ney([[1, 2, 3]] * 10 + [[4, 5], [6, 7, 1]], 3, range(1, SOS), SOS)
    wave = 0.1 * torch.randn(12000, generator=torch.Generator().manual_seed(5))

    def stream(fusion):
        rec = StreamingRecognizer(model, Tokens(), DecodeOptions(2, 2, beam=4, ctc_weight=0.5, reverse_weight=0.3),
                                  features=SNIPPED, fusion=fusion)
        for start in range(0, 12000, 1600):
            rec.accept_waveform(wave[start : start + 1600])
        return rec, rec.finalize()

    plain_rec, plain = stream(None)
    assert stream(ShallowFusion(lm, 0.0, 0.0))[1] == plain  # weight 0: nothing changes
    strong = ShallowFusion(lm, 3.0, 1.0)
    rec, text = stream(strong)
    enc = rec.encoder_output()
    with torch.no_grad():
        nbest = ctc_prefix_beam_search(model.ctc_log_probs(enc)[0], 4, 0, strong)
        expected = attention_rescoring(model, enc, enc.size(1), nbest, 0.5, 0.3, strong)
    assert text == Tokens().decode(expected)
    assert text != plain  # the LM did change the result, so the comparison above meant something
