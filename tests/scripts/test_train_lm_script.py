"""scripts/train_lm.py: token LM with a tokenizer, word LM with --words, and its refusals."""

import importlib.util
from pathlib import Path

import pytest

from asr.data.tokenizer import load_tokenizer, write_char_units
from asr.lm import load_token_lm, load_word_lm

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "train_lm.py"
TEXT = "alpha bravo\ncharlie alpha bravo\n\nbravo delta\n"


def _main():
    spec = importlib.util.spec_from_file_location("train_lm", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def test_token_and_word_lms_are_written_where_the_decoders_look(tmp_path, capsys):
    text = tmp_path / "text.txt"
    text.write_text(TEXT)
    write_char_units(TEXT.split("\n"), tmp_path / "corpus" / "tokenizer")
    tok = load_tokenizer(tmp_path / "corpus" / "tokenizer")
    main = _main()
    main(["--text", str(text), "--tokenizer", str(tmp_path / "corpus" / "tokenizer"), "--order", "3"])
    token_lm = load_token_lm(tmp_path / "corpus" / "lm" / "3gram.arpa.gz", tok)
    assert token_lm.order == 3
    main(["--text", str(text), "--tokenizer", str(tmp_path / "corpus" / "tokenizer"), "--words", "--order", "2"])
    assert "2-gram over 5 words (<unk> included)" in capsys.readouterr().out
    word_lm, words = load_word_lm(tmp_path / "corpus" / "lm" / "words_2gram.arpa.gz")
    ids = {w: i for i, w in enumerate(words)}
    assert sorted(words[:-1]) == ["<unk>", "alpha", "bravo", "charlie", "delta"]
    assert word_lm.logprob([ids["alpha"]], ids["bravo"]) > word_lm.logprob([ids["alpha"]], ids["delta"])


def test_a_token_lm_needs_a_tokenizer(tmp_path, capsys):
    text = tmp_path / "text.txt"
    text.write_text(TEXT)
    with pytest.raises(SystemExit):
        _main()(["--text", str(text)])
    assert "--tokenizer is needed" in capsys.readouterr().err
    _main()(["--text", str(text), "--words", "--order", "2", "--out", str(tmp_path / "w.arpa")])  # no tokenizer
    assert load_word_lm(tmp_path / "w.arpa")[0].order == 2
