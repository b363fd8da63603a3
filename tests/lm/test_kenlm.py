"""KenLM backend: the same scores as our estimator's LMs (1e-4 per token); skipped without the kenlm package."""

from __future__ import annotations

import argparse
import random
import string

import pytest

from asr.data.tokenizer import load_tokenizer, write_char_units
from asr.lm import (ShallowFusion, WordFusion, add_lm_arguments, fusion_from_args, load_token_lm, load_word_lm,
                    save_arpa, save_word_lm, token_names, train_token_lm, train_word_lm)
from asr.lm.kenlm_backend import BINARY_MAGIC, is_kenlm_binary, use_kenlm

TEXTS = ["the cat sat on the mat", "a dog sat on a log", "the dog and the cat", "cats and dogs",
         "on the mat the cat sat down", "a log on a mat"] * 3


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return load_tokenizer(write_char_units([" ".join(string.ascii_lowercase)], tmp_path_factory.mktemp("tok")))


@pytest.fixture(scope="module")
def lm_files(tokenizer, tmp_path_factory):
    out = tmp_path_factory.mktemp("lm")
    token_path = save_arpa(train_token_lm(TEXTS, tokenizer, 4), out / "4gram.arpa.gz", token_names(tokenizer))
    word_lm, words = train_word_lm(TEXTS, 3)
    return token_path, save_word_lm(word_lm, words, out / "words_3gram.arpa")


def test_backend_choice(tmp_path, lm_files):
    binary = tmp_path / "lm.bin"
    binary.write_bytes(BINARY_MAGIC + b"rest")
    assert is_kenlm_binary(binary) and not is_kenlm_binary(lm_files[0])
    assert use_kenlm(binary, "auto") and not use_kenlm(lm_files[0], "auto") and use_kenlm(lm_files[0], "kenlm")
    with pytest.raises(ValueError, match="only the kenlm backend"):
        use_kenlm(binary, "ours")
    with pytest.raises(ValueError, match="must be one of"):
        use_kenlm(lm_files[0], "srilm")
    with pytest.raises(FileNotFoundError):
        use_kenlm(tmp_path / "none.arpa", "auto")


def test_token_lm_scores_equal_ours(tokenizer, lm_files):
    pytest.importorskip("kenlm", reason="the kenlm package is not installed (pip install kenlm)")
    from asr.lm.kenlm_backend import load_kenlm_token_lm

    ours, theirs = load_token_lm(lm_files[0], tokenizer), load_kenlm_token_lm(lm_files[0], tokenizer)
    assert theirs.order == ours.order == 4 and theirs.eos_id == ours.eos_id
    rng = random.Random(0)
    ids = [i for i in range(tokenizer.vocab_size) if i not in (tokenizer.blank_id, tokenizer.sos_eos_id)]
    for text in TEXTS[:6]:
        tokens = tokenizer.encode(text)
        assert theirs.sentence_logprob(tokens) == pytest.approx(ours.sentence_logprob(tokens), abs=1e-4 * len(tokens))
    for _ in range(500):  # random histories: unseen contexts back off the same way
        history = [rng.choice(ids) for _ in range(rng.randint(0, 6))]
        token = rng.choice(ids + [tokenizer.sos_eos_id])
        assert theirs.logprob(history, token) == pytest.approx(ours.logprob(history, token), abs=1e-4)


def test_word_lm_and_fusions_equal_ours(tokenizer, lm_files):
    pytest.importorskip("kenlm", reason="the kenlm package is not installed (pip install kenlm)")
    parser = argparse.ArgumentParser()
    add_lm_arguments(parser)
    paths = ["--lm", str(lm_files[0]), "--word-lm", str(lm_files[1])]
    ours = fusion_from_args(parser.parse_args(paths), tokenizer)
    theirs = fusion_from_args(parser.parse_args([*paths, "--lm-backend", "kenlm"]), tokenizer)
    assert type(theirs.parts[0].lm).__name__ == "KenLMNgram" and type(theirs.parts[1].lm).__name__ == "KenLMNgram"
    assert isinstance(theirs.parts[0], ShallowFusion) and isinstance(theirs.parts[1], WordFusion)
    rng = random.Random(1)
    for _ in range(100):
        words = [rng.choice("the cat dog sat mat zebra on a".split()) for _ in range(rng.randint(1, 6))]
        tokens = tokenizer.encode(" ".join(words))
        assert theirs.sentence_score(tokens) == pytest.approx(ours.sentence_score(tokens), abs=1e-4 * len(tokens))
    word_lm, names = load_word_lm(lm_files[1])
    assert theirs.parts[1].words == names
