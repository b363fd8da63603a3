"""Word LM and lexicon fused token by token: scores equal a word-level reference; OOV words pay once."""

import argparse
import math
import random

import pytest
import torch

from asr.decode.ctc_prefix_beam import ctc_prefix_beam_search
from asr.lm import (FusionSum, ShallowFusion, WordFusion, add_lm_arguments, fusion_from_args, load_word_lm,
                    save_word_lm, train_kneser_ney, train_word_lm)
from asr.lm.words import UNK_WORD, arpa_vocabulary

# A sentencepiece-like inventory: whole words, word starts and letters to spell anything else.
PIECES = ["<blank>", "<unk>", "\u2581", "\u2581the", "\u2581ca", "t", "s", "\u2581d", "o", "g", "\u2581a", "r",
          "\u2581th", "e", "<sos/eos>"]
TEXTS = ["the cat", "the dog", "a cat", "the cats", "a dog", "the cat the dog"]
ID = {p: i for i, p in enumerate(PIECES)}


@pytest.fixture(scope="module")
def word_lm():
    return train_word_lm(TEXTS, 2)


def words_of(tokens, pieces=PIECES):
    return "".join(pieces[t] for t in tokens).replace("\u2581", " ").split()


def reference_score(lm, names, tokens, weight, bonus, penalty, pieces=PIECES):
    """The same score computed on the words the tokens spell (in reading order, the whole history given to
    the LM): the definition, no token-level bookkeeping."""
    ids = {w: i for i, w in enumerate(names)}
    lexicon = set(names) - {UNK_WORD, "</s>"}
    history, total = [], 0.0
    for word in words_of(tokens, pieces):
        wid = ids.get(word, ids[UNK_WORD])
        total += weight * lm.logprob(history, wid) + bonus - (penalty if word not in lexicon else 0.0)
        history.append(wid)
    return total + weight * lm.logprob(history, lm.eos_id)


@pytest.mark.parametrize("weight, bonus, penalty", [(1.0, 0.0, 0.0), (0.3, 1.0, 10.0), (2.0, -0.5, 3.0)])
def test_sentence_score_equals_the_word_level_reference(word_lm, weight, bonus, penalty):
    lm, names = word_lm
    fusion = WordFusion(lm, names, PIECES, weight, bonus, penalty)
    rng = random.Random(0)
    spellable = [i for i, p in enumerate(PIECES) if p not in ("<blank>", "<unk>", "<sos/eos>")]
    cases = [[ID["\u2581the"], ID["\u2581ca"], ID["t"]],  # the cat: in the lexicon
             [ID["\u2581th"], ID["e"], ID["\u2581d"], ID["o"], ID["g"], ID["s"]],  # the dogs: dogs is OOV
             [ID["\u2581th"]],  # "th": a prefix of "the", no word: OOV at its end
             [ID["\u2581ca"], ID["r"], ID["\u2581"], ID["t"]],  # car, then a marker alone before a word
             []]
    cases += [[rng.choice(spellable) for _ in range(rng.randint(1, 14))] for _ in range(200)]
    for tokens in cases:
        steps = [fusion.token_score(tokens[:i], t) for i, t in enumerate(tokens)]
        incremental = math.fsum(steps) + fusion.end_score(tokens)
        expected = reference_score(lm, names, tokens, weight, bonus, penalty)
        assert incremental == pytest.approx(expected, abs=1e-9), (tokens, words_of(tokens))
        assert fusion.sentence_score(tokens) == pytest.approx(expected, abs=1e-9)


# Sentences in which the same two words come in both orders before different continuations, so a
# trigram's (and a 4-gram's) scores depend on the ORDER of its history words: a context read
# newest-first instead of oldest-first changes them (the bigram tests above cannot see that).
ORDERED_TEXTS = ["the cat sat", "cat the dog", "the cat ran", "a cat the cat sat", "cat the dog ran",
                 "a dog sat", "the dog the cat", "dog the cat ran", "a the cat", "the a dog sat",
                 "the cat a dog", "dog a cat sat"]
ORDERED_PIECES = ["<blank>", "<unk>", "\u2581", "\u2581the", "\u2581ca", "t", "s", "\u2581d", "o", "g",
                  "\u2581a", "r", "\u2581sat", "\u2581ran", "n", "<sos/eos>"]


@pytest.mark.parametrize("order", [3, 4])
def test_higher_order_word_lm_reads_its_history_oldest_first(order):
    lm, names = train_word_lm(ORDERED_TEXTS, order)
    ids = {w: i for i, w in enumerate(names)}
    # the premise: swapping the two history words moves the score, so an order bug cannot hide
    swapped = [abs(lm.logprob([ids[a], ids[b]], ids[w]) - lm.logprob([ids[b], ids[a]], ids[w]))
               for a, b, w in (("the", "cat", "sat"), ("cat", "the", "dog"), ("the", "cat", "ran"))]
    assert min(swapped) > 0.1, swapped
    fusion = WordFusion(lm, names, ORDERED_PIECES, 1.0, 0.5, 4.0)
    tid = {p: i for i, p in enumerate(ORDERED_PIECES)}
    spellable = [i for i, p in enumerate(ORDERED_PIECES) if p not in ("<blank>", "<unk>", "<sos/eos>")]
    whole_words = [tid[p] for p in ("\u2581the", "\u2581sat", "\u2581ran", "\u2581a")]
    cat, dog = [tid["\u2581ca"], tid["t"]], [tid["\u2581d"], tid["o"], tid["g"]]
    rng = random.Random(order)
    cases = [[tid["\u2581the"], *cat, tid["\u2581sat"]], [*cat, tid["\u2581the"], *dog, tid["\u2581ran"]],
             [tid["\u2581a"], *cat, tid["\u2581the"], *cat, tid["\u2581sat"]]]
    # mostly lexicon words (so the trigram contexts are real ones), some spelled freely (OOV words, <unk>)
    for _ in range(300):
        tokens = []
        for _ in range(rng.randint(1, 7)):
            kind = rng.random()
            tokens += (cat if kind < 0.25 else dog if kind < 0.4 else [rng.choice(whole_words)] if kind < 0.85
                       else [rng.choice(spellable) for _ in range(rng.randint(1, 3))])
        cases.append(tokens)
    differs_when_swapped = 0
    for tokens in cases:
        steps = [fusion.token_score(tokens[:i], t) for i, t in enumerate(tokens)]
        expected = reference_score(lm, names, tokens, 1.0, 0.5, 4.0, ORDERED_PIECES)
        assert math.fsum(steps) + fusion.end_score(tokens) == pytest.approx(expected, abs=1e-9), \
            (tokens, words_of(tokens, ORDERED_PIECES))
        words = words_of(tokens, ORDERED_PIECES)
        if len(words) >= 3:
            context = [ids.get(w, ids[UNK_WORD]) for w in words[-3:-1]]
            last = ids.get(words[-1], ids[UNK_WORD])
            differs_when_swapped += abs(lm.logprob(context, last) - lm.logprob(context[::-1], last)) > 1e-6
    assert differs_when_swapped >= 50  # enough cases where the order of the history decides the score


def test_oov_penalty_is_paid_once_when_the_word_leaves_the_lexicon(word_lm):
    lm, names = word_lm
    fusion = WordFusion(lm, names, PIECES, weight=1.0, word_bonus=0.0, oov_penalty=7.0)
    dog = [ID["\u2581d"], ID["o"], ID["g"]]
    assert fusion.token_score(dog[:1], ID["o"]) == 0.0  # "do": a lexicon prefix, nothing to pay yet
    assert fusion.token_score(dog, ID["s"]) == -7.0  # "dogs" leaves the lexicon: pays at once ...
    assert fusion.token_score(dog + [ID["s"]], ID["s"]) == 0.0  # ... and only once
    # "cats" is a lexicon word, "cat" + "s" never left it
    assert fusion.token_score([ID["\u2581ca"], ID["t"]], ID["s"]) == 0.0
    # a new word that starts outside the lexicon pays as it starts (beside the previous word's LM score)
    after_cat = [ID["\u2581ca"], ID["t"]]
    word_end = fusion.token_score(after_cat, ID["\u2581d"])
    assert fusion.token_score(after_cat, ID["\u2581th"]) == pytest.approx(word_end)  # "th": still a prefix
    assert fusion.token_score([ID["\u2581ca"]], ID["o"]) == -7.0  # "cao"


def test_hotword_words_join_the_lexicon_and_pay_no_oov_penalty(word_lm):
    lm, names = word_lm
    fusion = WordFusion(lm, names, PIECES, weight=1.0, word_bonus=0.0, oov_penalty=7.0)
    dogs = [ID["\u2581d"], ID["o"], ID["g"], ID["s"]]
    with_dogs = fusion.with_words(["dogs", "cat"])
    assert fusion.token_score(dogs[:3], ID["s"]) == -7.0
    assert with_dogs.token_score(dogs[:3], ID["s"]) == 0.0
    # the LM itself still scores the new word as <unk>: only the penalty goes
    assert with_dogs.sentence_score(dogs) == pytest.approx(fusion.sentence_score(dogs) + 7.0)
    assert fusion.with_words(["cat"]) is fusion and fusion.with_words(["cat", "dogs"]) is with_dogs
    token_lm = ShallowFusion(train_kneser_ney([[3, 4]], 2, range(len(PIECES) - 1), len(PIECES) - 1), 0.5)
    both = FusionSum((token_lm, fusion)).with_words(["dogs"])
    assert both.parts[0] is token_lm and both.parts[1].token_score(dogs[:3], ID["s"]) == 0.0


def test_the_lexicon_turns_a_close_acoustic_call_into_a_word(word_lm):
    """CTC slightly prefers "dot" (not a word); the lexicon makes it "dog"; without fusion "dot" stays."""
    lm, names = word_lm
    frames = [{ID["\u2581d"]: 0.9}, {ID["o"]: 0.9}, {ID["t"]: 0.5, ID["g"]: 0.45}]
    log_probs = torch.full((len(frames), len(PIECES)), 1e-4)
    for t, probs in enumerate(frames):
        for tok, p in probs.items():
            log_probs[t, tok] = p
    log_probs = (log_probs / log_probs.sum(-1, keepdim=True)).log()
    plain = ctc_prefix_beam_search(log_probs, beam=5)
    fused = ctc_prefix_beam_search(log_probs, beam=5, fusion=WordFusion(lm, names, PIECES, 0.0, 0.0, 5.0))
    assert words_of(plain[0][0]) == ["dot"]
    assert words_of(fused[0][0]) == ["dog"]


def test_state_reads_only_the_last_words_of_a_long_prefix(word_lm):
    """The backward scan gives the score a from-scratch word split gives, however long the prefix."""
    lm, names = word_lm
    fusion = WordFusion(lm, names, PIECES, 1.0, 0.5, 2.0)
    sentence = [ID["\u2581the"], ID["\u2581ca"], ID["t"], ID["\u2581a"], ID["\u2581d"], ID["o"], ID["g"]] * 40
    long_prefix_score = fusion.token_score(sentence, ID["\u2581the"])  # completes "dog" after "... a"
    ids = {w: i for i, w in enumerate(names)}
    assert long_prefix_score == pytest.approx(lm.logprob([ids["a"]], ids["dog"]) + 0.5, abs=1e-12)


@pytest.mark.parametrize("order", [2, 3])
def test_arpa_round_trip_keeps_vocabulary_and_scores(order, tmp_path):
    """Bigram and trigram (the default word LM's order): two-word histories in both orders."""
    lm, names = train_word_lm(TEXTS if order == 2 else ORDERED_TEXTS, order)
    path = save_word_lm(lm, names, tmp_path / "words.arpa.gz")
    loaded, loaded_names = load_word_lm(path)
    assert sorted(loaded_names[:-1]) == sorted(names[:-1]) and loaded_names[-1] == "</s>"
    old = {w: i for i, w in enumerate(names)}
    new = {w: i for i, w in enumerate(loaded_names)}
    for history in ([], ["the"], ["a"], ["cat"], ["the", "cat"], ["cat", "the"], ["a", "dog"]):
        for word in [*names[:-1], "</s>"]:
            a = lm.logprob([old[w] for w in history], old[word])
            b = loaded.logprob([new[w] for w in history], new[word])
            assert b == pytest.approx(a, abs=1e-4)


def test_bad_word_lms_and_tokenizers_are_refused(word_lm, tmp_path):
    lm, names = word_lm
    with pytest.raises(FileNotFoundError, match="word language model not found"):
        load_word_lm(tmp_path / "missing.arpa")
    # an LM without <unk> could not score a word outside its vocabulary
    no_unk = train_kneser_ney([[0, 1], [1, 0]], 2, [0, 1], 2)
    path = save_word_lm(no_unk, ["cat", "dog", "</s>"], tmp_path / "no_unk.arpa")
    assert arpa_vocabulary(path) == ["cat", "dog"]
    with pytest.raises(ValueError, match="no <unk> unigram"):
        load_word_lm(path)
    (tmp_path / "empty.arpa").write_text("\\data\\\nngram 1=0\n\n\\1-grams:\n\n\\end\\\n")
    with pytest.raises(ValueError, match="no unigrams"):
        load_word_lm(tmp_path / "empty.arpa")
    with pytest.raises(ValueError, match="word marker"):
        WordFusion(lm, names, ["<blank>", "a", "b"], 1.0)
    for bad in (dict(weight=-1.0), dict(weight=math.nan), dict(word_bonus=math.inf), dict(oov_penalty=-2.0)):
        kwargs = dict(weight=1.0, word_bonus=0.0, oov_penalty=0.0) | bad
        with pytest.raises(ValueError):
            WordFusion(lm, names, PIECES, **kwargs)


class PieceTokenizer:
    vocab_size, blank_id, sos_eos_id = len(PIECES), 0, len(PIECES) - 1

    def id_to_piece(self, i):
        return PIECES[i]

    def encode(self, text):
        out = []
        for word in text.split():
            out += [ID["\u2581"]] + [ID[ch] for ch in word]
        return out


def test_fusion_from_args_builds_word_token_or_both(word_lm, tmp_path):
    from asr.lm import save_arpa, token_names, train_token_lm

    lm, names = word_lm
    words = save_word_lm(lm, names, tmp_path / "words.arpa")
    tok = PieceTokenizer()
    tokens = save_arpa(train_token_lm(["tog", "set ore"], tok, 2), tmp_path / "tokens.arpa", token_names(tok))
    parser = argparse.ArgumentParser()
    add_lm_arguments(parser)
    assert fusion_from_args(parser.parse_args([]), tok) is None
    only_words = fusion_from_args(parser.parse_args(["--word-lm", str(words), "--word-lm-weight", "0.4",
                                                     "--word-bonus", "2", "--oov-penalty", "6"]), tok)
    assert isinstance(only_words, WordFusion)
    assert only_words.settings() == {"word_lm": {"order": 2, "words": len(names) - 1, "weight": 0.4,
                                                 "word_bonus": 2.0, "oov_penalty": 6.0}}
    both = fusion_from_args(parser.parse_args(["--lm", str(tokens), "--word-lm", str(words)]), tok)
    assert isinstance(both, FusionSum) and isinstance(both.parts[0], ShallowFusion)
    sentence = [ID["\u2581ca"], ID["t"], ID["\u2581d"], ID["o"], ID["g"]]
    assert both.sentence_score(sentence) == pytest.approx(
        sum(part.sentence_score(sentence) for part in both.parts), abs=1e-12)
    assert set(both.settings()) == {"order", "weight", "length_bonus", "word_lm"}


def test_lm_argv_gives_another_script_the_same_lm_options():
    from asr.lm import lm_argv
    from asr.lm.options import lm_options

    parser = argparse.ArgumentParser()
    add_lm_arguments(parser)
    assert lm_argv(parser.parse_args(["--lm-weight", "2"])) == []  # no LM file: nothing to pass on
    for given in (["--lm", "t.arpa", "--lm-weight", "2", "--length-bonus", "-1"],
                  ["--word-lm", "w.arpa", "--word-lm-weight", "0.6", "--oov-penalty", "0"],
                  ["--lm", "t.arpa", "--word-lm", "w.arpa", "--word-bonus", "4"]):
        args = parser.parse_args(given)
        assert vars(parser.parse_args(lm_argv(args))) == vars(args), given
        assert vars(lm_options(lm_argv(args))) == vars(args), given  # read back from the strings
    with pytest.raises(ValueError, match="--lm-wieght"):
        lm_options(["--lm-wieght", "1"])
