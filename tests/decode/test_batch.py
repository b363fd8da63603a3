"""decode_batch: every mode on a tiny model, and agreement between modes where it must hold."""

import pytest

from asr.decode import MODES, attention_beam_search, ctc_greedy, decode_batch

SOS_EOS, VOCAB = 7, 8  # the tiny_model fixture (conftest.py)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("chunk_size", [0, 2])
def test_every_mode_returns_valid_token_lists(tiny_model, tiny_feats, mode, chunk_size):
    assert (tiny_model.sos_eos_id, tiny_model.vocab_size) == (SOS_EOS, VOCAB)
    feats, lens = tiny_feats
    hyps = decode_batch(tiny_model, feats, lens, mode, beam=3, chunk_size=chunk_size, left_chunks=1)
    assert len(hyps) == 3
    _, enc_lens = tiny_model.encode(feats, lens)
    for hyp, n in zip(hyps, enc_lens.tolist()):
        assert all(isinstance(t, int) and 0 <= t < VOCAB for t in hyp)
        if mode == "attention":
            assert SOS_EOS not in hyp  # <eos> ends a hypothesis and is stripped
        else:
            assert 0 not in hyp  # CTC never outputs blank
        assert len(hyp) <= n


def test_modes_agree_with_their_building_blocks(tiny_model, tiny_feats):
    feats, lens = tiny_feats
    enc, enc_lens = tiny_model.encode(feats, lens, chunk_size=2, left_chunks=1)
    greedy = ctc_greedy(tiny_model.ctc_log_probs(enc), enc_lens)
    assert decode_batch(tiny_model, feats, lens, "ctc_greedy", chunk_size=2, left_chunks=1) == greedy
    assert decode_batch(tiny_model, feats, lens, "ctc_prefix_beam", beam=1, chunk_size=2, left_chunks=1) == greedy
    att = decode_batch(tiny_model, feats, lens, "attention", beam=2)
    enc, enc_lens = tiny_model.encode(feats, lens)
    n = int(enc_lens[2])
    assert att[2] == attention_beam_search(tiny_model, enc[2:3, :n], n, beam=2, max_len=n)


def test_batch_padding_does_not_change_results(tiny_model, tiny_feats):
    feats, lens = tiny_feats
    batch = decode_batch(tiny_model, feats, lens, "attention_rescoring", beam=3)
    alone = decode_batch(tiny_model, feats[2:, : lens[2]], lens[2:], "attention_rescoring", beam=3)
    assert batch[2] == alone[0]


def test_unknown_mode_lists_the_valid_ones(tiny_model, tiny_feats):
    with pytest.raises(ValueError, match="ctc_greedy, ctc_prefix_beam, attention, attention_rescoring"):
        decode_batch(tiny_model, *tiny_feats, mode="beam")


def test_pure_ctc_model_refuses_attention_modes(tiny_feats):
    from asr.model import build_encoder
    from asr.model.asr_model import AsrModel

    enc = build_encoder(pos_enc="none", input_dim=20, d_model=16, num_heads=2, num_layers=1, ffn_dim=32,
                        conv_kernel=3, causal=True)
    model = AsrModel(enc, VOCAB, SOS_EOS, decoder_layers=0, ctc_weight=1.0).eval()
    assert len(decode_batch(model, *tiny_feats, mode="ctc_prefix_beam", beam=2)) == 3
    with pytest.raises(ValueError, match="no attention decoder"):
        decode_batch(model, *tiny_feats, mode="attention_rescoring")
