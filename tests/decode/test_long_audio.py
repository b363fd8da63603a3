"""Long inputs: chunked decoding through stream_step equals the chunk-masked forward and its working
memory does not grow with the length."""

import pytest
import torch

from asr.decode import decode_batch
from asr.decode import long_audio
from asr.decode.long_audio import encode_batch, stream_chunks
from asr.model import build_encoder
from asr.model.asr_model import AsrModel
from tests.decode.largest_tensor import LargestTensor

FEATS = 20


def tiny(pos_enc, online_cmn_frames=0.0):
    torch.manual_seed(0)
    enc = build_encoder(pos_enc=pos_enc, input_dim=FEATS, d_model=32, num_heads=2, num_layers=2, ffn_dim=64,
                        conv_kernel=3, causal=True, subsampling=4, online_cmn_frames=online_cmn_frames)
    return AsrModel(enc, 8, 7, decoder_layers=1, decoder_heads=2, decoder_ffn_dim=64).eval()


def batch(lengths, seed=1):
    gen = torch.Generator().manual_seed(seed)
    feats = torch.randn(len(lengths), max(lengths), FEATS, generator=gen)
    for b, n in enumerate(lengths):
        feats[b, n:] = 0.0
    return feats, torch.tensor(lengths)


@pytest.mark.parametrize("pos_enc, cmn", [("rel_xl", 0.0), ("rel_xl", 50.0), ("shaw", 0.0), ("abs_sin", 50.0)])
@pytest.mark.parametrize("chunk, left", [(4, 0), (3, 2)])
def test_chunked_decoding_streams_and_equals_the_masked_forward(monkeypatch, pos_enc, cmn, chunk, left):
    model = tiny(pos_enc, cmn)
    feats, lens = batch([230, 97, 61])
    monkeypatch.setattr(long_audio, "STREAM_MIN_FRAMES", 40)  # this batch (57 encoder frames) streams
    calls = []
    monkeypatch.setattr(long_audio, "stream_chunks", lambda *a, **k: calls.append(1) or stream_chunks(*a, **k))
    with torch.no_grad():
        masked, masked_lens = model.encode(feats, lens, chunk_size=chunk, left_chunks=left)
        streamed, streamed_lens = encode_batch(model, feats, lens, chunk, left)
    assert torch.equal(streamed_lens, masked_lens) and len(calls) == 3
    for b, n in enumerate(masked_lens.tolist()):
        torch.testing.assert_close(streamed[b, :n], masked[b, :n], rtol=1e-5, atol=1e-5)
    # The decoding entry point takes that route: same hypotheses as decoding the masked encoder output.
    hyps = decode_batch(model, feats, lens, "ctc_greedy", chunk_size=chunk, left_chunks=left)
    assert len(calls) == 6
    from asr.decode.ctc_greedy import ctc_greedy

    assert hyps == ctc_greedy(model.ctc_log_probs(masked), masked_lens, model.blank_id)


def test_progress_counts_every_feature_frame(monkeypatch):
    model = tiny("rel_xl")
    feats, lens = batch([90, 50])
    seen = []
    with torch.no_grad():
        list(stream_chunks(model.encoder, feats[0], 4, 0, piece=40, progress=seen.append))
        assert seen == [40, 40, 10]  # piece by piece, as each is encoded
        seen.clear()
        monkeypatch.setattr(long_audio, "STREAM_MIN_FRAMES", 5)  # this batch streams, utterance by utterance
        encode_batch(model, feats, lens, 4, 0, progress=seen.append)
        assert seen == [90, 50]  # one STREAM_PIECE each
        seen.clear()
        encode_batch(model, feats, lens, 0, -1, progress=seen.append)  # the forward: the batch's, at its end
        assert seen == [140]


def test_chunked_encoding_memory_does_not_grow_with_the_length():
    """Two lengths (4x apart): the encoder's largest working tensor and its stream state stay the same."""
    model = tiny("rel_xl", 50.0)
    largest, states = [], []
    for frames in (1600, 6400):
        feats, _ = batch([frames])
        gen = stream_chunks(model.encoder, feats[0], chunk_size=4, left_chunks=2, piece=200)
        with torch.no_grad(), LargestTensor() as mode:
            count = sum(out.size(1) for out in gen)
        assert count == model.encoder.output_length(frames)
        largest.append(mode.largest)
    assert largest[0] == largest[1], largest
    # And that is a chunk's working set, far below one (T', T') map of the short input.
    assert largest[0] < (1600 // 4) ** 2 / 4

