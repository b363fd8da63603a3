"""Hotword biasing in the CTC prefix beam, attention rescoring and decode_batch."""

from __future__ import annotations

import math
import random

import pytest
import torch

from asr.decode import decode_batch
from asr.decode.batch import search_encoded
from asr.decode.context_graph import ContextGraph
from asr.decode.ctc_prefix_beam import CtcPrefixBeamSearch, ctc_prefix_beam_search
from asr.decode.hotwords import Biasing
from asr.decode.rescoring import rescoring_scores


def random_log_probs(seed: int, frames: int, vocab: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.log_softmax(torch.randn(frames, vocab, generator=g) * 2, dim=-1)  # (T', V)


@pytest.mark.parametrize("seed", range(5))
def test_an_empty_graph_changes_nothing(seed):
    lp = random_log_probs(seed, 30, 7)
    assert ctc_prefix_beam_search(lp, 4, 0, None, ContextGraph([])) == ctc_prefix_beam_search(lp, 4, 0)


def test_bias_turns_a_near_miss_into_the_phrase():
    # frame by frame: 3, then 4 (0.55) or 5 (0.45), then blank
    probs = torch.tensor([[0.05, 0.0, 0.0, 0.95, 0.0, 0.0],
                          [0.0, 0.0, 0.0, 0.0, 0.55, 0.45],
                          [0.98, 0.0, 0.0, 0.0, 0.01, 0.01]]) + 1e-4
    lp = probs.log()
    assert ctc_prefix_beam_search(lp, 4)[0][0] == [3, 4]
    graph = ContextGraph([((3, 5), 1.0)])
    assert ctc_prefix_beam_search(lp, 4, 0, None, graph)[0][0] == [3, 5]
    # The score returned is CTC's alone; without extra unbiased prefixes the beam prunes as the plain one.
    best, ctc = ctc_prefix_beam_search(lp, 4, 0, None, graph, unbiased_keep=0)[0]
    assert best == [3, 5]
    assert ctc == pytest.approx(dict((tuple(h), s) for h, s in ctc_prefix_beam_search(lp, 4))[(3, 5)])


@pytest.mark.parametrize("seed", range(5))
def test_unfinished_phrases_leave_the_final_ranking_as_without_biasing(seed):
    # Two frames, a 3-token phrase: no hypothesis can complete it. A beam wide enough to prune nothing
    # holds the same prefixes either way; finals must rank exactly as without biasing, partials must not.
    lp = random_log_probs(seed, 2, 4)
    graph = ContextGraph([((1, 2, 3), 5.0)])
    plain, biased = CtcPrefixBeamSearch(100, 0), CtcPrefixBeamSearch(100, 0, context=graph)
    plain.advance(lp)
    biased.advance(lp)
    assert biased.nbest(complete=True) == plain.nbest(complete=True)
    # partials keep the provisional bonus of the phrase being spelled
    expected = sorted(plain.nbest(complete=False), key=lambda e: -(e[1] + graph.walk(e[0])[1]))
    assert [h for h, _ in biased.nbest(complete=False)] == [h for h, _ in expected]


def test_a_held_token_is_one_token_to_the_graph():
    # Two frames of "k" (0.6) or "l" (0.39), hardly any blank: "l" held over both frames is one l (a CTC
    # repeat, merged), never the listed "l l", which needs a blank between its two l's.
    probs = torch.tensor([[0.01, 0.39, 0.6], [0.01, 0.39, 0.6]])
    graph = ContextGraph([((1, 1), 5.0)])
    assert ctc_prefix_beam_search(probs.log(), 3)[0][0] == [2]
    nbest = ctc_prefix_beam_search(probs.log(), 3, 0, None, graph, unbiased_keep=0)
    assert nbest[0][0] == [2]  # "l" earns nothing: the bonus of the doubled letter would put it first
    # With a blank between them, two l's are the phrase and earn its bonus.
    spelled = torch.tensor([[0.01, 0.39, 0.6], [0.6, 0.01, 0.39], [0.01, 0.39, 0.6]])
    assert ctc_prefix_beam_search(spelled.log(), 3, 0, None, graph, unbiased_keep=0)[0][0] == [1, 1]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("beam", [3, 10_000])
def test_every_prefix_holds_the_graph_score_of_its_own_tokens(seed, beam):
    # Phrases with repeated tokens: however a prefix was reached (a new token, a repeat merged into
    # its last token, a blank), its running score is the graph's walk over its tokens, so rankings
    # are CTC plus the graph's own scores, pruned (beam 3) or not.
    lp = random_log_probs(seed, 6, 4)
    graph = ContextGraph([((1, 1), 3.0), ((2, 1, 1), 2.0), ((1, 2), 1.0), ((3, 3, 3), 1.5)])
    search = CtcPrefixBeamSearch(beam, 0, context=graph, unbiased_keep=0)
    search.advance(lp)
    for complete, score in ((True, graph.sentence_score), (False, lambda h: graph.walk(h)[1])):
        nbest = search.nbest(complete=complete)
        biased = [ctc + score(h) for h, ctc in nbest]
        assert all(a >= b - 1e-9 for a, b in zip(biased, biased[1:])), (complete, nbest)


def test_room_for_unbiased_prefixes_saves_what_was_said_from_a_failed_phrase():
    # Said: 1 5 1. The phrase (2, 5, 3) starts with frame 0's runner-up and goes on with frame 1's 5:
    # its provisional bonus fills a two-prefix beam with (2,) and (2, 5), the phrase then fails, and
    # the prefix that was said is gone. One slot kept on the unbiased score keeps it to the end.
    probs = torch.tensor([[0.2, 0.5, 0.3, 0.0, 0.0, 0.0],
                          [0.45, 0.0, 0.0, 0.0, 0.0, 0.55],
                          [0.3, 0.6, 0.1, 0.0, 0.0, 0.0],
                          [0.9, 0.05, 0.05, 0.0, 0.0, 0.0]]) + 1e-4
    lp = probs.log()
    graph = ContextGraph([((2, 5, 3), 2.0)])
    assert ctc_prefix_beam_search(lp, 2)[0][0] == [1, 5, 1]
    assert ctc_prefix_beam_search(lp, 2, 0, None, graph, unbiased_keep=0)[0][0] == [2, 5]
    nbest = ctc_prefix_beam_search(lp, 2, 0, None, graph, unbiased_keep=1)
    assert nbest[0][0] == [1, 5, 1] and len(nbest) == 3  # the beam plus one kept for its unbiased score


def test_room_for_unbiased_prefixes_still_lets_a_phrase_win():
    probs = torch.tensor([[0.05, 0.0, 0.0, 0.95, 0.0, 0.0],
                          [0.0, 0.0, 0.0, 0.0, 0.55, 0.45],
                          [0.98, 0.0, 0.0, 0.0, 0.01, 0.01]]) + 1e-4
    graph = ContextGraph([((3, 5), 1.0)])
    for keep in (0, 1, 4):
        assert ctc_prefix_beam_search(probs.log(), 2, 0, None, graph, unbiased_keep=keep)[0][0] == [3, 5]


@pytest.mark.parametrize("seed", range(3))
def test_room_for_unbiased_prefixes_is_nothing_without_a_graph(seed):
    lp = random_log_probs(seed, 20, 6)
    assert ctc_prefix_beam_search(lp, 3, unbiased_keep=5) == ctc_prefix_beam_search(lp, 3)
    with pytest.raises(ValueError, match="unbiased_keep"):
        CtcPrefixBeamSearch(3, 0, context=ContextGraph([((1,), 1.0)]), unbiased_keep=-1)
    with pytest.raises(ValueError, match="unbiased_keep"):
        ContextGraph([((1,), 1.0)], unbiased_keep=-1)
    graph = ContextGraph([((1,), 1.0)])
    graph.unbiased_keep = -2  # set after construction: the search still refuses the value it resolves
    with pytest.raises(ValueError, match=r"unbiased_keep \(-2\)"):
        CtcPrefixBeamSearch(3, 0, context=graph)


def test_rescoring_adds_the_share_of_the_bonus_it_keeps(tiny_model):
    enc = torch.randn(1, 12, tiny_model.encoder.output_size)  # (1, T', D)
    nbest = [([1, 2, 3], -1.0), ([1, 4], -2.0), ([], -3.0)]
    graph = ContextGraph([((2, 3), 1.5)])
    base = rescoring_scores(tiny_model, enc, 12, nbest, 0.5, 0.0)
    for weight in (0.0, 0.5, 1.0):
        biased = rescoring_scores(tiny_model, enc, 12, nbest, 0.5, 0.0, None, graph, weight)
        expected = base + weight * torch.tensor([3.0, 0.0, 0.0], dtype=torch.float64)
        assert torch.allclose(biased, expected)


def test_decode_batch_takes_one_list_per_utterance(tiny_model, tiny_feats):
    feats, lens = tiny_feats
    enc, enc_lens = tiny_model.encode(feats, lens)
    plain = search_encoded(tiny_model, enc, enc_lens, "attention_rescoring", beam=3)
    rng = random.Random(0)
    strong = Biasing(ContextGraph([((rng.randrange(2, 7),) * 2, 50.0)]), (("x", 50.0),), frozenset({"x"}))
    per_utt = search_encoded(tiny_model, enc, enc_lens, "attention_rescoring", beam=3, biasing=[None, strong, None])
    assert per_utt[0] == plain[0] and per_utt[2] == plain[2]
    assert decode_batch(tiny_model, feats, lens, "ctc_prefix_beam", beam=3, biasing=[None] * 3) == \
        decode_batch(tiny_model, feats, lens, "ctc_prefix_beam", beam=3)
    with pytest.raises(ValueError, match="takes no language model or hotwords"):
        decode_batch(tiny_model, feats, lens, "ctc_greedy", biasing=strong)
    with pytest.raises(ValueError, match="3 utterances"):
        search_encoded(tiny_model, enc, enc_lens, "ctc_prefix_beam", biasing=[None])
    assert math.isfinite(float(len(per_utt[1])))
