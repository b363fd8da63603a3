"""The context graph against a brute-force matcher that knows nothing of automata."""

from __future__ import annotations

import random

import pytest

from asr.decode.context_graph import ROOT, ContextGraph


def brute_final(tokens, phrases) -> float:
    """Every occurrence of every phrase, overlapping and nested ones included, earns |p| * score."""
    total = 0.0
    for p, score in phrases.items():
        n = len(p)
        total += sum(n * score for i in range(len(tokens) - n + 1) if tuple(tokens[i:i + n]) == p)
    return total


def brute_potential(tokens, phrases) -> float:
    """|s| * best score ahead, for s the longest suffix of tokens that is a proper prefix of a phrase."""
    for k in range(len(tokens), 0, -1):
        suffix = tuple(tokens[len(tokens) - k:])
        ahead = [score for p, score in phrases.items() if len(p) > k and p[:k] == suffix]
        if ahead:
            return k * max(ahead)
    return 0.0


def random_phrases(rng, vocab, count, max_len):
    phrases = {}
    for _ in range(count):
        p = tuple(rng.randrange(vocab) for _ in range(rng.randint(1, max_len)))
        phrases[p] = max(phrases.get(p, -1e9), round(rng.uniform(0.5, 3.0), 2))
    if count >= 2:  # make sure some phrases nest and share prefixes
        base = next(iter(phrases))
        phrases[base + (rng.randrange(vocab),)] = 1.5
        phrases[base[1:] or (0,)] = 2.0
    return phrases


@pytest.mark.parametrize("seed", range(40))
def test_running_and_final_scores_equal_brute_force(seed):
    rng = random.Random(seed)
    vocab = rng.choice([2, 3, 5])  # tiny vocabularies: many overlaps and repeats
    phrases = random_phrases(rng, vocab, rng.randint(1, 6), 4)
    share = [1.0, 0.5, 0.0][seed % 3]  # the provisional share: the final score never depends on it
    graph = ContextGraph(list(phrases.items()), provisional=share)
    for _ in range(5):
        tokens = [rng.randrange(vocab) for _ in range(rng.randint(0, 25))]
        state, running = ROOT, 0.0
        for i, tok in enumerate(tokens):
            state, gain = graph.step(state, tok)
            running += gain
            prefix = tokens[:i + 1]
            potential = share * brute_potential(prefix, phrases)
            assert running == pytest.approx(brute_final(prefix, phrases) + potential, abs=1e-9)
            assert graph.potential(state) == pytest.approx(potential, abs=1e-9)
        assert running + graph.finish(state) == pytest.approx(brute_final(tokens, phrases), abs=1e-9)
        assert graph.sentence_score(tokens) == pytest.approx(brute_final(tokens, phrases), abs=1e-9)


def test_unfinished_match_is_fully_taken_back():
    graph = ContextGraph([((1, 2, 3), 2.0)])
    state, running = ROOT, 0.0
    for tok in (1, 2):
        state, gain = graph.step(state, tok)
        assert gain == pytest.approx(2.0)  # a bonus per matched token while the phrase grows
        running += gain
    assert running + graph.finish(state) == 0.0  # the utterance ends inside the phrase: nothing is kept
    state, gain = graph.step(state, 7)  # a token that breaks the match takes it all back at once
    assert gain == pytest.approx(-4.0) and state == ROOT
    assert graph.sentence_score([1, 2, 4, 1, 2]) == 0.0  # never completes a phrase: as without biasing


def test_completed_phrase_keeps_its_bonus_and_fail_arcs_keep_the_suffix_match():
    graph = ContextGraph([((1, 2), 1.0), ((2, 3, 4), 1.0)])
    assert graph.sentence_score([1, 2]) == pytest.approx(2.0)
    # "1 2" completes, its suffix "2" goes on into "2 3 4", which completes too
    assert graph.sentence_score([1, 2, 3, 4]) == pytest.approx(5.0)
    # "1 2 3" then 9: the "2 3" partial of the long phrase is taken back, the short phrase stays
    assert graph.sentence_score([1, 2, 3, 9]) == pytest.approx(2.0)


def test_nested_phrases_and_shared_prefixes():
    graph = ContextGraph([((5, 6), 1.0), ((5, 6, 7), 2.0), ((5, 8), 3.0), ((6,), 0.5)])
    assert graph.sentence_score([5, 6, 7]) == pytest.approx(2 * 1.0 + 3 * 2.0 + 0.5)
    assert graph.sentence_score([5, 8]) == pytest.approx(6.0)
    assert graph.sentence_score([5]) == 0.0


def test_duplicate_phrases_keep_the_highest_score_and_bad_phrases_are_refused():
    for listed in ([((1, 2), 1.0), ((1, 2), 4.0)], [((1, 2), 4.0), ((1, 2), 1.0)]):  # the higher one last, first
        graph = ContextGraph(listed)
        assert graph.phrases == {(1, 2): 4.0}
        assert graph.sentence_score([1, 2]) == pytest.approx(8.0)
        assert graph.walk([1])[1] == pytest.approx(4.0)  # the prefix holds the higher score's potential too
    with pytest.raises(ValueError, match="at least one token"):
        ContextGraph([((), 1.0)])
    with pytest.raises(ValueError, match="finite"):
        ContextGraph([((1,), float("nan"))])
    with pytest.raises(ValueError, match="provisional"):
        ContextGraph([((1,), 1.0)], provisional=1.5)


def test_empty_graph_scores_nothing():
    graph = ContextGraph([])
    assert graph.walk([1, 2, 3]) == (ROOT, 0.0)
    assert graph.finish(ROOT) == 0.0
