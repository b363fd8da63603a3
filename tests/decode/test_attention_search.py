"""Attention beam search and attention rescoring against explicit computations."""

import itertools

import pytest
import torch

from asr.decode import attention_beam_search, attention_rescoring, ctc_prefix_beam_search, rescoring_scores

SOS_EOS, VOCAB = 7, 8  # the tiny_model fixture (conftest.py)


def greedy_attention(model, enc, enc_len, max_len):
    prefix = [SOS_EOS]
    for _ in range(max_len):
        tok = int(model.attention_log_probs(enc, torch.tensor([enc_len]), torch.tensor([prefix])).argmax())
        if tok == SOS_EOS:
            break
        prefix.append(tok)
    return prefix[1:]


@pytest.fixture
def eos_bias(tiny_model):
    """Make <eos> likely enough that hypotheses end before max_len; undone afterwards."""
    bias = tiny_model.decoder.output.bias
    saved = bias.detach().clone()

    def set_bias(value: float):
        with torch.no_grad():
            bias.copy_(saved)
            bias[SOS_EOS] += value

    yield set_bias
    with torch.no_grad():
        bias.copy_(saved)


@pytest.mark.parametrize("eos_boost", [0.0, 2.0])
def test_beam_one_equals_greedy(tiny_model, tiny_feats, eos_bias, eos_boost):
    eos_bias(eos_boost)
    feats, lens = tiny_feats
    enc, enc_lens = tiny_model.encode(feats, lens)
    for b in range(3):
        n = int(enc_lens[b])
        got = attention_beam_search(tiny_model, enc[b : b + 1], n, beam=1, max_len=n)
        assert got == greedy_attention(tiny_model, enc[b : b + 1, :n], n, n)


def test_wide_beam_finds_the_exhaustive_best(tiny_model, tiny_feats, eos_bias):
    eos_bias(-4.0)  # <eos> unlikely: running hypotheses stay ahead of ended ones for a while
    feats, lens = tiny_feats
    enc, enc_lens = tiny_model.encode(feats[:1], lens[:1])
    max_len = 3
    tokens = [t for t in range(VOCAB) if t != SOS_EOS]
    every = [list(h) for n in range(max_len + 1) for h in itertools.product(tokens, repeat=n)]
    scores = tiny_model.score_hypotheses(enc, enc_lens[0], every)
    best = every[int(scores.argmax())]
    # 1 + 7 + 49 + 343 hypotheses: a beam of 400 never prunes.
    assert attention_beam_search(tiny_model, enc, enc_lens[0], beam=400, max_len=max_len) == best


def test_search_stops_once_no_running_hypothesis_can_win(tiny_model, tiny_feats, eos_bias, monkeypatch):
    eos_bias(6.0)  # <eos> first is by far the best
    enc, enc_lens = tiny_model.encode(*tiny_feats)
    calls = []
    original = tiny_model.attention_step
    monkeypatch.setattr(tiny_model, "attention_step", lambda *a: calls.append(1) or original(*a))
    n = int(enc_lens[0])
    assert attention_beam_search(tiny_model, enc[:1], n, beam=4, max_len=n) == []
    assert len(calls) <= 2 < n


@pytest.mark.parametrize("reverse_weight", [0.0, 0.3])
def test_rescoring_picks_the_best_combined_score(tiny_model, tiny_feats, reverse_weight):
    feats, lens = tiny_feats
    enc, enc_lens = tiny_model.encode(feats[1:2, :52], lens[1:2])
    n = int(enc_lens[0])
    nbest = ctc_prefix_beam_search(tiny_model.ctc_log_probs(enc)[0, :n], beam=6)
    assert len(nbest) > 1
    ctc_weight = 0.5
    explicit = []
    for hyp, ctc_score in nbest:
        l2r = tiny_model.score_hypotheses(enc, n, [hyp])[0].item()
        r2l = tiny_model.score_hypotheses(enc, n, [hyp], reverse_weight=1.0)[0].item()
        explicit.append((1 - reverse_weight) * l2r + reverse_weight * r2l + ctc_weight * ctc_score)
    got = rescoring_scores(tiny_model, enc, n, nbest, ctc_weight, reverse_weight)
    assert got.tolist() == pytest.approx(explicit, abs=1e-4)
    expected = nbest[max(range(len(nbest)), key=explicit.__getitem__)][0]
    assert attention_rescoring(tiny_model, enc, n, nbest, ctc_weight, reverse_weight) == expected
    # A huge CTC weight makes the CTC best win.
    assert attention_rescoring(tiny_model, enc, n, nbest, 1e6, reverse_weight) == nbest[0][0]
    assert attention_rescoring(tiny_model, enc, n, [], ctc_weight, reverse_weight) == []


def test_bad_arguments(tiny_model, tiny_feats):
    enc, enc_lens = tiny_model.encode(*tiny_feats)
    with pytest.raises(ValueError, match=r"beam \(0\)"):
        attention_beam_search(tiny_model, enc[:1], enc_lens[0], beam=0, max_len=3)
    with pytest.raises(ValueError, match=r"\(1, T', D\)"):
        attention_beam_search(tiny_model, enc, enc_lens[0], beam=2, max_len=3)


def test_zero_encoder_frames_give_ctc_best_or_empty(tiny_model, tiny_feats):
    enc, _ = tiny_model.encode(*tiny_feats)
    empty = enc[:1, :0]  # (1, 0, D)
    assert attention_beam_search(tiny_model, empty, 0, beam=3, max_len=5) == []
    nbest = [([3, 4], -1.0), ([3], -2.0)]
    assert attention_rescoring(tiny_model, empty, 0, nbest, 0.5, 0.0) == [3, 4]
