"""ShallowFusion: token, end and sentence scores agree; bad weights are refused."""

import dataclasses
import math

import pytest

from asr.lm import ShallowFusion
from asr.lm.ngram import train_kneser_ney

EOS = 4


@pytest.fixture(scope="module")
def lm():
    return train_kneser_ney([[0, 1, 2], [1, 2], [2, 0, 3], [0, 1, 2, 3], []], 3, [0, 1, 2, 3], EOS)


@pytest.mark.parametrize("weight, bonus", [(0.0, 0.0), (0.5, 0.0), (2.0, 2.5), (1.3, -1.0), (0.0, 3.0)])
@pytest.mark.parametrize("sentence", [[], [0], [0, 1, 2], [3, 3, 0, 2, 1, 0]])
def test_sentence_score_is_the_sum_of_token_scores_and_end_score(lm, weight, bonus, sentence):
    fusion = ShallowFusion(lm, weight, bonus)
    tokens = [fusion.token_score(sentence[:i], t) for i, t in enumerate(sentence)]
    total = math.fsum(tokens) + fusion.end_score(sentence)
    assert fusion.sentence_score(sentence) == pytest.approx(total, abs=1e-12)
    # and each piece is what it says: weight * log P (+ bonus per token, none for the end)
    for i, t in enumerate(sentence):
        assert tokens[i] == pytest.approx(weight * lm.logprob(sentence[:i], t) + bonus, abs=1e-12)
    assert fusion.end_score(sentence) == pytest.approx(weight * lm.logprob(sentence, EOS), abs=1e-12)
    assert fusion.sentence_score(sentence) == pytest.approx(
        weight * lm.sentence_logprob(sentence) + bonus * len(sentence), abs=1e-12)


def test_default_length_bonus_is_zero(lm):
    fusion = ShallowFusion(lm, 1.0)
    assert fusion.token_score([0], 1) == pytest.approx(lm.logprob([0], 1), abs=1e-15)


@pytest.mark.parametrize("weight", [-0.1, -1e-9, math.nan, math.inf, -math.inf])
def test_bad_weight_is_refused(lm, weight):
    with pytest.raises(ValueError, match="weight"):
        ShallowFusion(lm, weight, 0.0)


@pytest.mark.parametrize("bonus", [math.nan, math.inf, -math.inf])
def test_non_finite_bonus_is_refused(lm, bonus):
    with pytest.raises(ValueError, match="length_bonus"):
        ShallowFusion(lm, 1.0, bonus)


def test_zero_weight_and_negative_bonus_are_accepted_and_frozen(lm):
    fusion = ShallowFusion(lm, 0.0, -2.0)
    assert fusion.sentence_score([0, 1]) == pytest.approx(-4.0, abs=1e-12)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fusion.weight = 1.0
