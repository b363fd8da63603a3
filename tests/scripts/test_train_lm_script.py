"""scripts/train_lm.py (asr/lm/from_text.py): token LM with a tokenizer, word LM with --words, and its refusals."""

import subprocess
import sys
from pathlib import Path

import pytest

from asr.data.tokenizer import load_tokenizer, write_char_units
from asr.lm import load_token_lm, load_word_lm
from asr.lm.from_text import train_lm_from_text

ROOT = Path(__file__).resolve().parents[2]
TEXT = "alpha bravo\ncharlie alpha bravo\n\nbravo delta\n"


def test_token_and_word_lms_are_written_where_the_decoders_look(tmp_path, capsys):
    text = tmp_path / "text.txt"
    text.write_text(TEXT)
    write_char_units(TEXT.split("\n"), tmp_path / "corpus" / "tokenizer")
    tok = load_tokenizer(tmp_path / "corpus" / "tokenizer")
    train_lm_from_text(text, 3, tmp_path / "corpus" / "tokenizer")
    token_lm = load_token_lm(tmp_path / "corpus" / "lm" / "3gram.arpa.gz", tok)
    assert token_lm.order == 3
    train_lm_from_text(text, 2, tmp_path / "corpus" / "tokenizer", words=True)
    assert "2-gram over 5 words (<unk> included)" in capsys.readouterr().out
    word_lm, words = load_word_lm(tmp_path / "corpus" / "lm" / "words_2gram.arpa.gz")
    ids = {w: i for i, w in enumerate(words)}
    assert sorted(words[:-1]) == ["<unk>", "alpha", "bravo", "charlie", "delta"]
    assert word_lm.logprob([ids["alpha"]], ids["bravo"]) > word_lm.logprob([ids["alpha"]], ids["delta"])


def test_a_token_lm_needs_a_tokenizer(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text(TEXT)
    done = subprocess.run([sys.executable, "scripts/train_lm.py", "--text", str(text)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--tokenizer is needed" in done.stderr
    with pytest.raises(ValueError, match="a tokenizer is needed"):
        train_lm_from_text(text, 3)
    train_lm_from_text(text, 2, words=True, out=tmp_path / "w.arpa")  # no tokenizer
    assert load_word_lm(tmp_path / "w.arpa")[0].order == 2
