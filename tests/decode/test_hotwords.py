"""Hotword lists: parsing, the training text's normalization, tokenizer checks, limits, the content cache."""

from __future__ import annotations

import string

import pytest

from asr.data.tokenizer import load_tokenizer, train_sentencepiece, write_char_units
from asr.decode.hotwords import (DEFAULT_HOTWORD_SCORE, HotwordCompiler, HotwordError, HotwordLimits, as_entries, parse_entry,
                                 phrase_normalizer, read_hotwords)

TEXTS = ["call anna at seven", "the new york office", "turn on the kitchen lights", "zentrova is a product",
         "don't stop the music", "quick brown fox jumps over the lazy dog"] * 20


@pytest.fixture(scope="module")
def char_tok(tmp_path_factory):
    return load_tokenizer(write_char_units([string.ascii_lowercase + "'"], tmp_path_factory.mktemp("char")))


@pytest.fixture(scope="module")
def spm_tok(tmp_path_factory):
    return load_tokenizer(train_sentencepiece(TEXTS, tmp_path_factory.mktemp("spm"), vocab_size=60))


def test_entries_and_files(tmp_path):
    assert parse_entry("new york:2.5") == ("new york", 2.5)
    assert parse_entry("ratio 3:x") == ("ratio 3:x", None)
    assert parse_entry("  anna ") == ("anna", None)
    path = tmp_path / "hot.txt"
    path.write_text("# names\nanna\n\nnew york:3\n", encoding="utf-8")
    assert read_hotwords(path) == [("anna", None), ("new york", 3.0)]
    assert as_entries(["a:1", ("b", 2)]) == [("a", 1.0), ("b", 2.0)]
    with pytest.raises(FileNotFoundError, match="hotword file not found"):
        read_hotwords(tmp_path / "missing.txt")
    (tmp_path / "bad.txt").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(HotwordError, match="not UTF-8"):
        read_hotwords(tmp_path / "bad.txt")


def test_normalized_as_the_synth_transcripts(char_tok):
    normalize = phrase_normalizer(char_tok)
    assert normalize("Call ANNA at 7!") == "call anna at seven"
    with pytest.raises(HotwordError, match="cannot spell: é"):
        normalize("café")


def test_compiled_graph_spells_the_phrases_with_the_models_tokens(spm_tok):
    biasing = HotwordCompiler(spm_tok, default_score=1.5).compile(["New York", "zentrova:3"])
    assert biasing.phrases == (("new york", 1.5), ("zentrova", 3.0))
    assert biasing.words == {"new", "york", "zentrova"}
    ids = spm_tok.encode("the new york office")
    york = spm_tok.encode("new york")
    assert biasing.graph.sentence_score(ids) == pytest.approx(1.5 * len(york))
    assert biasing.graph.sentence_score(spm_tok.encode("the new office")) == 0.0


@pytest.mark.parametrize("order", [1, -1], ids=["higher-last", "higher-first"])
def test_a_phrase_listed_twice_keeps_its_higher_score_in_either_order(char_tok, order):
    # "Anna " normalizes to "anna"; "bob" without a score has the default, above its listed 1.
    entries = [("anna", 2.0), ("Anna ", 5.0), ("bob", None), ("bob", 1.0)][::order]
    biasing = HotwordCompiler(char_tok, cache_size=0).compile(entries)
    assert biasing.phrases == (("anna", 5.0), ("bob", DEFAULT_HOTWORD_SCORE))
    assert biasing.graph.sentence_score(char_tok.encode("anna")) == pytest.approx(4 * 5.0)


def test_bad_lists_get_one_line_errors(char_tok):
    compiler = HotwordCompiler(char_tok)
    assert compiler.compile([]) is None
    for bad, message in [(["  "], "empty hotword"), (["?!"], "empty hotword"), (["x:-1"], "must be a finite"),
                         (["x:nan"], "must be a finite"), (["日本"], "cannot spell")]:
        with pytest.raises(HotwordError, match=message):
            compiler.compile(bad)
    limits = HotwordLimits(max_phrases=2, max_phrase_chars=5)
    with pytest.raises(HotwordError, match="too many hotwords: 3 phrases \\(limit 2 per request\\)"):
        limits.check(as_entries(["a", "b", "c"]))
    with pytest.raises(HotwordError, match="hotword too long: 6 characters .*limit 5 characters per phrase"):
        limits.check(as_entries(["abcdef"]))
    limits.check(as_entries(["abcde", "b"]))
    with pytest.raises(ValueError, match="score"):
        HotwordCompiler(char_tok, default_score=0.0)


def test_untokenizable_characters_without_the_synth_alphabet(tmp_path):
    tok = load_tokenizer(write_char_units(["ABC DEF"], tmp_path))  # an uppercase corpus: no normalize_text
    compiler = HotwordCompiler(tok)
    assert compiler.compile(["abc"]).phrases == (("ABC", DEFAULT_HOTWORD_SCORE),)  # folded to the tokenizer's case
    with pytest.raises(HotwordError, match="cannot spell: X"):
        compiler.compile(["abx"])


def test_cache_is_keyed_by_content(char_tok):
    compiler = HotwordCompiler(char_tok, cache_size=2)
    first = compiler.compile(["anna", "bob"])
    assert compiler.compile(["Bob", "anna"]) is first  # same normalized content, other order
    assert (compiler.hits, compiler.misses) == (1, 1)
    compiler.compile(["carl"])
    compiler.compile(["dora"])  # evicts the oldest
    assert compiler.compile(["anna", "bob"]) is not first
    assert compiler.compile(["anna", "bob:3"]).phrases != first.phrases


def test_cache_evicts_the_least_recently_used_list_not_the_oldest(char_tok):
    compiler = HotwordCompiler(char_tok, cache_size=2)
    anna, bob = compiler.compile(["anna"]), compiler.compile(["bob"])
    assert compiler.compile(["anna"]) is anna  # used again: now bob is the least recently used
    compiler.compile(["carl"])
    assert compiler.compile(["anna"]) is anna  # kept, though inserted first
    assert compiler.compile(["bob"]) is not bob  # evicted
    assert (compiler.hits, compiler.misses) == (2, 4)


def test_cache_is_bounded_in_graph_states(char_tok):
    lists = [[word * 3] for word in ("ab", "cd", "ef", "gh")]  # 7 states each (root + 6 letters)
    compiler = HotwordCompiler(char_tok, cache_states=20)
    first = compiler.compile(lists[0])
    assert compiler.cached == (1, first.graph.num_states) == (1, 7)
    for words in lists[1:]:
        compiler.compile(words)
    assert compiler.cached == (2, 14)  # 21 > 20 states: the least recently used went, however few lists
    assert compiler.compile(lists[0]) is not first
    assert compiler.compile(["abcdefgh" * 3]) is not None and compiler.cached[1] <= 20  # 25 states: never kept
    with pytest.raises(ValueError, match="cache_states"):
        HotwordCompiler(char_tok, cache_states=-1)


def test_unbiased_keep_travels_with_the_compiled_graph(char_tok):
    """The compiler's setting lands on every graph (and so on every search it reaches); the default
    is the search's; a negative one is refused; the flag reaches biasing_from_args."""
    import argparse

    from asr.decode.ctc_prefix_beam import DEFAULT_UNBIASED_KEEP, CtcPrefixBeamSearch
    from asr.decode.hotwords import add_hotword_arguments

    biasing = HotwordCompiler(char_tok, unbiased_keep=3).compile(["anna"])
    assert biasing.graph.unbiased_keep == 3 and biasing.settings()["unbiased_keep"] == 3
    assert CtcPrefixBeamSearch(4, 0, context=biasing.graph).unbiased_keep == 3
    assert CtcPrefixBeamSearch(4, 0, context=biasing.graph, unbiased_keep=1).unbiased_keep == 1  # explicit wins
    default = HotwordCompiler(char_tok).compile(["anna"])
    assert default.graph.unbiased_keep is None and default.settings()["unbiased_keep"] == DEFAULT_UNBIASED_KEEP
    assert CtcPrefixBeamSearch(4, 0, context=default.graph).unbiased_keep == DEFAULT_UNBIASED_KEEP
    with pytest.raises(ValueError, match="unbiased keep"):
        HotwordCompiler(char_tok, unbiased_keep=-1)
    parser = argparse.ArgumentParser()
    add_hotword_arguments(parser)
    assert parser.parse_args([]).hotword_unbiased_keep is None
    assert parser.parse_args(["--hotword-unbiased-keep", "0"]).hotword_unbiased_keep == 0
    for bad in ("-1", "two"):  # refused when the command line is read (every script shares the flag)
        with pytest.raises(SystemExit):
            parser.parse_args(["--hotword-unbiased-keep", bad])


def test_hotword_unbiased_keep_flag_reaches_the_graph(char_tok, tmp_path):
    import argparse

    from asr.decode.hotwords import add_hotword_arguments, biasing_from_args

    (tmp_path / "words.txt").write_text("anna\n")
    parser = argparse.ArgumentParser()
    add_hotword_arguments(parser)
    args = parser.parse_args(["--hotwords", str(tmp_path / "words.txt"), "--hotword-unbiased-keep", "0"])
    assert biasing_from_args(args, char_tok).graph.unbiased_keep == 0
