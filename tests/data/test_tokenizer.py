import pytest
import sentencepiece as spm

from asr.data.tokenizer import CharTokenizer, SentencePieceTokenizer, load_tokenizer, train_sentencepiece


def test_sentencepiece_ids_from_model_file(spm_dir, tiny_texts):
    tok = load_tokenizer(spm_dir)
    assert isinstance(tok, SentencePieceTokenizer)
    pieces = spm.SentencePieceProcessor(model_file=str(next(spm_dir.glob("*.model")))).get_piece_size()
    assert (tok.blank_id, tok.unk_id) == (0, 1)
    assert tok.sos_eos_id == tok.vocab_size - 1 == pieces
    for text in tiny_texts[:10]:
        ids = tok.encode(text)
        assert ids and all(2 <= i < tok.sos_eos_id for i in ids)
        assert tok.decode(ids) == text
    # specials are dropped when decoding
    assert tok.decode([0] + tok.encode("hello") + [tok.sos_eos_id]) == "hello"


def test_bpe(tiny_texts, tmp_path):
    (tmp_path / "units.txt").write_text("<blank> 0\n<unk> 1\n<sos/eos> 2\n")  # a stale char tokenizer's
    path = train_sentencepiece(tiny_texts * 3, tmp_path, vocab_size=40, model_type="bpe")
    # Removed: a folder with units.txt beside a .model reads as Wenet's BPE layout.
    assert not (tmp_path / "units.txt").exists() and isinstance(load_tokenizer(tmp_path), SentencePieceTokenizer)
    tok = load_tokenizer(path)
    assert tok.decode(tok.encode(tiny_texts[0])) == tiny_texts[0]
    with pytest.raises(ValueError, match="wordpiece"):
        train_sentencepiece(tiny_texts, tmp_path, 40, model_type="wordpiece")


def test_char_units(char_dir, tiny_texts):
    tok = load_tokenizer(char_dir)
    assert isinstance(tok, CharTokenizer)
    assert (tok.blank_id, tok.unk_id, tok.sos_eos_id) == (0, 1, tok.vocab_size - 1)
    assert tok.decode(tok.encode(tiny_texts[0])) == tiny_texts[0]
    assert tok.encode("中") == [tok.unk_id]


def test_char_units_validated(tmp_path):
    (tmp_path / "units.txt").write_text("<unk> 0\n<blank> 1\na 2\n<sos/eos> 3\n")
    with pytest.raises(ValueError, match="special ids"):
        load_tokenizer(tmp_path)
    with pytest.raises(FileNotFoundError):
        load_tokenizer(tmp_path / "nothing_here")
