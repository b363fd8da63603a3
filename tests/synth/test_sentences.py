import re

from asr.synth.lexicon import ing_of, load_lexicon, past_of, plural_of, third_person_of
from asr.synth.sentences import SentenceGenerator, sentence_rng
from asr.synth.corpus import SynthConfig

SPOKEN = re.compile(r"[a-z']+( [a-z']+)*")


def test_inflection_rules():
    assert plural_of("box") == "boxes" and plural_of("city") == "cities" and plural_of("day") == "days"
    assert past_of("carry") == "carried" and past_of("bake") == "baked" and past_of("play") == "played"
    assert ing_of("bake") == "baking" and ing_of("lie") == "lying" and ing_of("agree") == "agreeing"
    assert third_person_of("go") == "goes" and third_person_of("watch") == "watches"


def test_lexicon_irregular_forms():
    lex = load_lexicon()
    verbs = {v.base: v for v in lex.verbs}
    assert verbs["run"].past == "ran" and verbs["run"].ing == "running"
    nouns = {n.singular: n for n in lex.nouns}
    assert nouns["child"].plural == "children" and nouns["rice"].plural is None


def test_sentences_are_normalized_and_deterministic():
    gen = SentenceGenerator()
    first = [gen(sentence_rng(0, "train", i)) for i in range(300)]
    assert first == [gen(sentence_rng(0, "train", i)) for i in range(300)]
    assert all(SPOKEN.fullmatch(s) for s in first), [s for s in first if not SPOKEN.fullmatch(s)][:3]
    assert first != [gen(sentence_rng(1, "train", i)) for i in range(300)]


def test_default_train_size_uses_over_2000_distinct_words():
    # lower bound on the default train utterance count: every utterance is at most 10 s
    n_utts = int(SynthConfig("unused").train_hours * 3600 / 10)
    gen = SentenceGenerator()
    words = set()
    for i in range(n_utts):
        words.update(gen(sentence_rng(0, "train", i)).split())
    assert len(words) >= 2000, len(words)
