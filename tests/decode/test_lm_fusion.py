"""Shallow fusion in the CTC prefix beam, attention rescoring and decode_batch."""

import math
import random

import pytest
import torch

from asr.decode import CtcPrefixBeamSearch, ctc_prefix_beam_search, decode_batch, rescoring_scores
from asr.decode.rescoring import attention_rescoring
from asr.lm import ShallowFusion
from asr.lm.ngram import train_kneser_ney
from test_ctc_search import brute_force, check_incremental_equals_one_shot, random_log_probs

SOS_EOS, VOCAB = 7, 8  # the tiny_model fixture (conftest.py)


def random_lm(vocab, order=3, seed=0, eos=None):
    """An LM over tokens 1..vocab-1 (blank 0 excluded); eos defaults to the id after the last token."""
    rng = random.Random(seed)
    sentences = [[rng.randrange(1, vocab) for _ in range(rng.randint(0, 6))] for _ in range(30)]
    return train_kneser_ney(sentences, order, range(1, vocab), vocab if eos is None else eos)


@pytest.mark.parametrize("seed", range(4))
def test_zero_weight_fusion_changes_nothing(seed):
    lp = random_log_probs(40, 6, seed, peak=2.0 * (seed % 2), dtype=torch.float64)
    fusion = ShallowFusion(random_lm(6, seed=seed), 0.0, 0.0)
    for beam in (1, 4):
        assert ctc_prefix_beam_search(lp, beam, 0, fusion) == ctc_prefix_beam_search(lp, beam)


@pytest.mark.parametrize("weight, bonus", [(1.5, 0.0), (0.7, 2.0), (0.0, 3.0), (3.0, -1.0)])
@pytest.mark.parametrize("seed", range(2))
def test_unpruned_fused_search_returns_exact_ctc_scores_ranked_by_fused_score(seed, weight, bonus):
    lp = random_log_probs(5, 4, seed, dtype=torch.float64)
    oracle = brute_force(lp)
    fusion = ShallowFusion(random_lm(4, seed=seed), weight, bonus)
    nbest = ctc_prefix_beam_search(lp, beam=10_000, fusion=fusion)  # no pruning at all
    assert {tuple(h) for h, _ in nbest} == set(oracle)
    for hyp, score in nbest:
        assert score == pytest.approx(oracle[tuple(hyp)], abs=1e-10)  # CTC alone, no LM in it
    fused = [s + fusion.sentence_score(h) for h, s in nbest]
    assert all(a >= b - 1e-9 for a, b in zip(fused, fused[1:]))
    best = max(oracle, key=lambda y: oracle[y] + fusion.sentence_score(list(y)))
    assert tuple(nbest[0][0]) == best
    if weight or bonus:
        plain_best = max(oracle, key=oracle.get)
        assert oracle[best] + fusion.sentence_score(list(best)) >= \
            oracle[plain_best] + fusion.sentence_score(list(plain_best)) - 1e-12


def test_pruned_fused_scores_stay_ctc_log_probabilities():
    # a large length bonus makes every fused score far above its CTC one: returning those would show
    lp = random_log_probs(7, 4, 5, peak=3.0, dtype=torch.float64)
    oracle = brute_force(lp)
    fusion = ShallowFusion(random_lm(4, seed=5), 0.5, 5.0)
    nbest = ctc_prefix_beam_search(lp, beam=3, fusion=fusion)
    assert len(nbest) == 3
    for hyp, score in nbest:
        # pruned alignments are lost, so at most the exact sum over alignments
        assert score <= oracle[tuple(hyp)] + 1e-12
    assert math.fsum(math.exp(s) for _, s in nbest) <= 1.0 + 1e-12


# Three frames: token 1, then 3 (p=0.5) or 2 (p=0.4), then blank. The acoustics favour [1, 3].
AMBIGUOUS = torch.log(torch.tensor([
    [0.05, 0.90, 0.03, 0.02],
    [0.10, 0.00, 0.40, 0.50],
    [0.90, 0.04, 0.03, 0.03],
], dtype=torch.float64).clamp(min=1e-6))


@pytest.mark.parametrize("beam", [2, 4])
def test_strong_lm_resolves_an_ambiguous_frame(beam):
    assert ctc_prefix_beam_search(AMBIGUOUS, beam)[0][0] == [1, 3]
    lm = train_kneser_ney([[1, 2]] * 20, 3, [1, 2, 3], 4)
    fusion = ShallowFusion(lm, 1.0, 0.0)
    assert ctc_prefix_beam_search(AMBIGUOUS, beam, 0, fusion)[0][0] == [1, 2]
    # the LM's sentence wins, but the score returned (beam wide enough to prune nothing) is its CTC log-probability
    oracle = brute_force(AMBIGUOUS)
    wide = ctc_prefix_beam_search(AMBIGUOUS, 100, 0, fusion)
    assert wide[0][0] == [1, 2]
    for hyp, score in wide:
        assert score == pytest.approx(oracle[tuple(hyp)], abs=1e-9)
    # an LM that saw the other sentence keeps [1, 3]
    other = train_kneser_ney([[1, 3]] * 20, 3, [1, 2, 3], 4)
    assert ctc_prefix_beam_search(AMBIGUOUS, beam, 0, ShallowFusion(other, 1.0, 0.0))[0][0] == [1, 3]


def test_end_score_decides_between_complete_hypotheses():
    # One frame, token 1 or 2 equally likely. The LM starts with 1 more often (P(1|<s>) ~ 0.7) but ends after
    # 1 almost never (P(</s>|1) ~ 0.01) and after 2 almost always: [2] wins only with the end-of-sentence term.
    lp = torch.log(torch.tensor([[0.02, 0.49, 0.49]], dtype=torch.float64))
    lm = train_kneser_ney([[1, 2]] * 10 + [[2]] * 4, 2, [1, 2], 3)
    fusion = ShallowFusion(lm, 1.0, 0.0)
    nbest = ctc_prefix_beam_search(lp, 3, 0, fusion)
    assert nbest[0][0] == [2]
    prefix_only = {tuple(h): s + sum(fusion.token_score(h[:i], t) for i, t in enumerate(h)) for h, s in nbest}
    assert max(prefix_only, key=prefix_only.get) == (1,)  # what ranking without end_score would pick
    # a partial result ranks the same beam as prefixes that go on: no end-of-sentence term
    search = CtcPrefixBeamSearch(3, 0, fusion)
    search.advance(lp)
    assert search.nbest() == nbest
    assert search.best() == [1] and search.nbest(complete=False)[0][0] == [1]
    assert sorted(map(tuple, (h for h, _ in search.nbest(complete=False)))) == sorted(prefix_only)


@pytest.mark.parametrize("seed", range(3))
def test_incremental_chunks_equal_one_shot_with_fusion(seed):
    lp = random_log_probs(37, 7, seed, peak=2.0, dtype=torch.float64)
    fusion = ShallowFusion(random_lm(7, seed=seed), 0.8, 1.0)
    one_shot = check_incremental_equals_one_shot(lp, seed, fusion=fusion)
    assert one_shot != ctc_prefix_beam_search(lp, 4)  # the fusion does change something here


# ---------------------------------------------------------------- rescoring and decode_batch on the tiny model
@pytest.fixture(scope="module")
def model_lm():
    """Over the tiny model's ids: 1..6 predictable, <sos/eos> 7 ends sentences."""
    return random_lm(SOS_EOS, order=3, seed=3, eos=SOS_EOS)


@pytest.fixture(scope="module")
def encoded(tiny_model, tiny_feats):
    enc, enc_lens = tiny_model.encode(*tiny_feats)
    return enc, enc_lens.tolist(), tiny_model.ctc_log_probs(enc)


def test_rescoring_scores_add_the_sentence_score(tiny_model, encoded, model_lm):
    enc, lens, log_probs = encoded
    fusion = ShallowFusion(model_lm, 0.9, 1.5)
    for b, n in enumerate(lens):
        nbest = ctc_prefix_beam_search(log_probs[b, :n], 4, 0, fusion)
        plain = rescoring_scores(tiny_model, enc[b : b + 1], n, nbest, 0.5, 0.3)
        fused = rescoring_scores(tiny_model, enc[b : b + 1], n, nbest, 0.5, 0.3, fusion)
        expected = torch.tensor([fusion.sentence_score(h) for h, _ in nbest], dtype=torch.float64)
        assert fused.dtype == torch.float64
        torch.testing.assert_close(fused - plain, expected, atol=1e-9, rtol=0)
        best = attention_rescoring(tiny_model, enc[b : b + 1], n, nbest, 0.5, 0.3, fusion)
        assert best == nbest[int(fused.argmax())][0]


@pytest.mark.parametrize("mode", ["ctc_greedy", "attention"])
def test_decode_batch_refuses_fusion_for_unfused_modes(tiny_model, tiny_feats, model_lm, mode):
    with pytest.raises(ValueError, match=f"mode '{mode}' takes no language model"):
        decode_batch(tiny_model, *tiny_feats, mode=mode, beam=2, fusion=ShallowFusion(model_lm, 0.5))


@pytest.mark.parametrize("mode", ["ctc_prefix_beam", "attention_rescoring"])
def test_decode_batch_with_fusion(tiny_model, tiny_feats, encoded, model_lm, mode):
    enc, lens, log_probs = encoded
    plain = decode_batch(tiny_model, *tiny_feats, mode=mode, beam=3, reverse_weight=0.3)
    off = ShallowFusion(model_lm, 0.0, 0.0)
    assert decode_batch(tiny_model, *tiny_feats, mode=mode, beam=3, reverse_weight=0.3, fusion=off) == plain
    # a strong LM reaches both passes: the result is the building blocks' with the same fusion
    strong = ShallowFusion(model_lm, 3.0, 1.0)
    fused = decode_batch(tiny_model, *tiny_feats, mode=mode, beam=3, reverse_weight=0.3, fusion=strong)
    expected = []
    for b, n in enumerate(lens):
        nbest = ctc_prefix_beam_search(log_probs[b, :n], 3, 0, strong)
        if mode == "ctc_prefix_beam":
            expected.append(nbest[0][0])
        else:
            expected.append(attention_rescoring(tiny_model, enc[b : b + 1], n, nbest, 0.5, 0.3, strong))
    assert fused == expected
    assert fused != plain
