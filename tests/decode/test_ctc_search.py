"""CTC greedy and prefix beam search: hand cases, greedy equivalence, exact oracle, incremental == one-shot."""

import itertools
import math

import pytest
import torch

from asr.decode import CtcPrefixBeamSearch, ctc_greedy, ctc_prefix_beam_search


def random_log_probs(T, V, seed, peak=0.0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(T, V, generator=g, dtype=dtype)
    if peak:
        # One dominant class per frame: a trained model's typical output.
        logits[torch.arange(T), torch.randint(0, V, (T,), generator=g)] += peak
    return torch.log_softmax(logits, dim=-1)


def one_hot_log_probs(path, V):
    lp = torch.full((len(path), V), -20.0)
    lp[torch.arange(len(path)), torch.tensor(path)] = 0.0
    return lp


def test_greedy_merges_repeats_and_drops_blanks():
    lp = one_hot_log_probs([0, 2, 2, 0, 2, 3, 3, 0, 0, 1], 4)
    lp2 = one_hot_log_probs([1, 1, 0, 0, 0, 0, 0, 0, 0, 0], 4)
    hyps = ctc_greedy(torch.stack([lp, lp2]), torch.tensor([10, 2]))
    assert hyps == [[2, 2, 3, 1], [1]]
    assert ctc_greedy(lp[None], torch.tensor([0])) == [[]]


@pytest.mark.parametrize("peak", [0.0, 4.0])
@pytest.mark.parametrize("seed", range(5))
def test_beam_one_equals_greedy(seed, peak):
    lp = random_log_probs(40, 6, seed, peak)
    best, _ = ctc_prefix_beam_search(lp, beam=1)[0]
    assert best == ctc_greedy(lp[None], torch.tensor([40]))[0]


def brute_force(lp: torch.Tensor) -> dict[tuple, float]:
    """log P(labelling) by summing every alignment (float64)."""
    T, V = lp.shape
    totals: dict[tuple, float] = {}
    for path in itertools.product(range(V), repeat=T):
        collapsed, prev = [], None
        for s in path:
            if s != prev and s != 0:
                collapsed.append(s)
            prev = s
        score = sum(lp[t, s].item() for t, s in enumerate(path))
        key = tuple(collapsed)
        totals[key] = math.log(math.exp(totals[key]) + math.exp(score)) if key in totals else score
    return totals


@pytest.mark.parametrize("seed", range(3))
def test_unpruned_scores_equal_the_sum_over_alignments(seed):
    lp = random_log_probs(5, 3, seed, dtype=torch.float64)
    oracle = brute_force(lp)
    nbest = ctc_prefix_beam_search(lp, beam=1000)  # no pruning at all
    assert len(nbest) == len(oracle)
    for hyp, score in nbest:
        assert score == pytest.approx(oracle[tuple(hyp)], abs=1e-10)
    scores = [s for _, s in nbest]
    assert scores == sorted(scores, reverse=True)
    assert math.fsum(math.exp(s) for s in scores) == pytest.approx(1.0, abs=1e-10)


def test_pruned_best_is_the_true_best_on_a_peaked_input():
    lp = random_log_probs(6, 3, 7, peak=3.0, dtype=torch.float64)
    oracle = brute_force(lp)
    true_best = max(oracle, key=oracle.get)
    hyp, score = ctc_prefix_beam_search(lp, beam=3)[0]
    assert tuple(hyp) == true_best
    # Pruned prefixes take their alignments with them: the score is a lower bound.
    assert oracle[true_best] - 1.0 < score <= oracle[true_best] + 1e-12


def check_incremental_equals_one_shot(lp, seed, beam=4, fusion=None):
    """Feeding ``lp`` in random pieces gives the one-shot search's partials and n-best (also used with an LM)."""
    one_shot = ctc_prefix_beam_search(lp, beam, 0, fusion)
    search = CtcPrefixBeamSearch(beam, 0, fusion)
    g = torch.Generator().manual_seed(seed)
    start = 0
    while start < lp.shape[0]:
        n = int(torch.randint(0, 6, (1,), generator=g))  # pieces of 0..5 frames
        search.advance(lp[start : start + n])
        start += n
        if n:
            alone = CtcPrefixBeamSearch(beam, 0, fusion)
            alone.advance(lp[:start])
            assert search.nbest(complete=False) == alone.nbest(complete=False)
            assert search.best() == alone.best() == alone.nbest(complete=False)[0][0]
    assert search.nbest() == one_shot
    assert search.num_frames == lp.shape[0]
    search.reset()
    assert search.best() == [] and search.nbest() == [([], 0.0)]
    return one_shot


@pytest.mark.parametrize("seed", range(3))
def test_incremental_chunks_equal_one_shot(seed):
    check_incremental_equals_one_shot(random_log_probs(37, 7, seed, peak=2.0), seed)


def test_blank_id_other_than_zero():
    lp = one_hot_log_probs([3, 1, 1, 3, 1, 2], 4)
    assert ctc_greedy(lp[None], torch.tensor([6]), blank_id=3) == [[1, 1, 2]]
    assert ctc_prefix_beam_search(lp, beam=3, blank_id=3)[0][0] == [1, 1, 2]


def test_bad_beam_and_shape():
    with pytest.raises(ValueError, match=r"beam \(0\)"):
        CtcPrefixBeamSearch(0)
    with pytest.raises(ValueError, match=r"\(t, V\)"):
        CtcPrefixBeamSearch(2).advance(torch.zeros(1, 3, 4))
