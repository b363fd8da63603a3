"""Tokenizers with the toolkit's fixed special ids, read back from the model file.

id 0 = <blank> (CTC blank), id 1 = <unk>, last id (vocab_size - 1) = <sos/eos>.

SentencePiece: trained with pad_id=0 (<blank>) and unk_id=1, no bos/eos; the
wrapper appends <sos/eos> after the pieces, so vocab_size = pieces + 1 and every
id follows from the `.model` file. Char units: `units.txt` lists `unit id` lines
that already contain <blank>, <unk> and <sos/eos>; "▁" stands for a space.
Wenet's BPE layout (an imported Wenet model): ids from `units.txt`, pieces from its
`bpe.model`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Protocol

import sentencepiece as spm

BLANK, UNK, SOS_EOS, SPACE = "<blank>", "<unk>", "<sos/eos>", "\u2581"


class Tokenizer(Protocol):
    vocab_size: int
    blank_id: int
    unk_id: int
    sos_eos_id: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


class SentencePieceTokenizer:
    """A sentencepiece model plus an appended <sos/eos> id."""

    def __init__(self, model_path: str | Path) -> None:
        self.model_path = Path(model_path)
        self.sp = spm.SentencePieceProcessor(model_file=str(self.model_path))
        pieces = self.sp.get_piece_size()
        if self.sp.id_to_piece(0) != BLANK or self.sp.unk_id() != 1:
            raise ValueError(
                f"{model_path}: expected id 0 = {BLANK} and unk id 1, got id 0 = {self.sp.id_to_piece(0)!r} "
                f"and unk id {self.sp.unk_id()}; train it with scripts/train_tokenizer.py"
            )
        self.blank_id, self.unk_id = 0, 1
        self.sos_eos_id = pieces
        self.vocab_size = pieces + 1

    def encode(self, text: str) -> list[int]:
        return list(self.sp.encode(text, out_type=int))

    def decode(self, ids: Sequence[int]) -> str:
        keep = [int(i) for i in ids if 0 < int(i) < self.sos_eos_id]
        return self.sp.decode(keep)

    def id_to_piece(self, i: int) -> str:
        return SOS_EOS if i == self.sos_eos_id else self.sp.id_to_piece(int(i))


class CharTokenizer:
    """One id per character from `units.txt`; unknown characters map to <unk>."""

    def __init__(self, units_path: str | Path) -> None:
        self.units_path = Path(units_path)
        units: dict[str, int] = {}
        for line_no, line in enumerate(self.units_path.read_text("utf-8").splitlines(), 1):
            if not line.strip():
                continue
            parts = line.split()
            if len(parts) != 2 or not parts[1].isdigit():
                raise ValueError(f"{units_path}:{line_no}: expected 'unit id', got {line!r}")
            units[parts[0]] = int(parts[1])
        ids = sorted(units.values())
        if ids != list(range(len(ids))):
            raise ValueError(f"{units_path}: ids must be 0..{len(ids) - 1} without gaps")
        specials = {BLANK: 0, UNK: 1, SOS_EOS: len(ids) - 1}
        wrong = {u: units.get(u) for u, want in specials.items() if units.get(u) != want}
        if wrong:
            raise ValueError(f"{units_path}: special ids must be {specials}, got {wrong}")
        self.units = units
        self.id_to_unit = {i: u for u, i in units.items()}
        self.blank_id, self.unk_id = 0, 1
        self.vocab_size = len(ids)
        self.sos_eos_id = self.vocab_size - 1

    def encode(self, text: str) -> list[int]:
        joined = SPACE.join(text.split())
        return [self.units.get(ch, self.unk_id) for ch in joined]

    def decode(self, ids: Sequence[int]) -> str:
        specials = (self.blank_id, self.unk_id, self.sos_eos_id)
        chars = [self.id_to_unit[int(i)] for i in ids if int(i) not in specials and int(i) in self.id_to_unit]
        return "".join(chars).replace(SPACE, " ").strip()

    def id_to_piece(self, i: int) -> str:
        return self.id_to_unit[int(i)]


class UnitsBpeTokenizer(CharTokenizer):
    """Ids from `units.txt`, pieces from a sentencepiece model (Wenet's BPE layout).

    Wenet's English models list their pieces in `units.txt` (<blank> 0, <unk> 1, ...,
    <sos/eos> last) and split text with a `bpe.model` trained without those specials, so
    the ids are the units file's, not the sentencepiece model's. Text is upper-cased before
    splitting, as Wenet does; a piece missing from the units maps to <unk>.
    """

    def __init__(self, units_path: str | Path, model_path: str | Path) -> None:
        super().__init__(units_path)
        self.model_path = Path(model_path)
        self.sp = spm.SentencePieceProcessor(model_file=str(self.model_path))

    def encode(self, text: str) -> list[int]:
        pieces = self.sp.encode(" ".join(text.upper().split()), out_type=str)
        return [self.units.get(p, self.unk_id) for p in pieces]

    def decode(self, ids: Sequence[int]) -> str:
        specials = (self.blank_id, self.unk_id, self.sos_eos_id)
        pieces = [self.id_to_unit[int(i)] for i in ids if int(i) not in specials and int(i) in self.id_to_unit]
        return "".join(pieces).replace(SPACE, " ").strip()


def load_tokenizer(path: str | Path) -> SentencePieceTokenizer | CharTokenizer:
    """A tokenizer from a `.model` file, a `units.txt` file, or a folder holding one of them
    (a folder with both is Wenet's BPE layout: :class:`UnitsBpeTokenizer`)."""
    path = Path(path)
    if path.is_dir():
        models = sorted(path.glob("*.model"))
        if len(models) > 1:
            raise ValueError(f"{path} holds several sentencepiece models {[m.name for m in models]}; pass one")
        if models and (path / "units.txt").is_file():
            return UnitsBpeTokenizer(path / "units.txt", models[0])
        if models:
            return SentencePieceTokenizer(models[0])
        if (path / "units.txt").is_file():
            return CharTokenizer(path / "units.txt")
        raise FileNotFoundError(f"no *.model or units.txt in {path}")
    if not path.is_file():
        raise FileNotFoundError(f"tokenizer not found: {path}")
    return SentencePieceTokenizer(path) if path.suffix == ".model" else CharTokenizer(path)


def train_sentencepiece(
    texts: Iterable[str], out_dir: str | Path, vocab_size: int, model_type: str = "bpe"
) -> Path:
    """Train a sentencepiece model whose wrapper vocab (pieces + <sos/eos>) has `vocab_size` ids.

    `texts` is streamed into `<out_dir>/train_text.txt`; sentencepiece samples at most
    2M sentences of it, so memory stays bounded whatever the corpus size.

    On a small text set sentencepiece may make fewer pieces than asked
    (hard_vocab_limit off); the model file is the truth either way.
    """
    if model_type not in ("unigram", "bpe"):
        raise ValueError(f"model_type must be 'unigram' or 'bpe', got {model_type!r}")
    if vocab_size < 4:
        raise ValueError(f"vocab_size must be at least 4 (blank, unk, one piece, sos/eos), got {vocab_size}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.model"):
        old.unlink()  # load_tokenizer picks the single model in the folder
    # A units.txt beside the model would make the folder read as Wenet's BPE layout.
    (out_dir / "units.txt").unlink(missing_ok=True)
    # streamed to disk one line at a time: `texts` may be a lazy pass over a large manifest
    text_file = out_dir / "train_text.txt"
    lines = 0
    with open(text_file, "w", encoding="utf-8") as f:
        for text in texts:
            if text and text.strip():
                f.write(text.strip() + "\n")
                lines += 1
    if not lines:
        raise ValueError("no non-empty transcripts to train the tokenizer on")
    prefix = out_dir / f"{model_type}{vocab_size}"
    spm.SentencePieceTrainer.train(
        input=str(text_file), model_prefix=str(prefix), vocab_size=vocab_size - 1, model_type=model_type,
        character_coverage=1.0, pad_id=0, pad_piece=BLANK, unk_id=1, unk_piece=UNK, bos_id=-1, eos_id=-1,
        hard_vocab_limit=False, input_sentence_size=2_000_000, shuffle_input_sentence=False,
        num_threads=1, minloglevel=2,
    )
    return prefix.with_suffix(".model")


def write_char_units(texts: Iterable[str], out_dir: str | Path) -> Path:
    """Build `units.txt` from every character seen in `texts` (spaces become "▁")."""
    chars = sorted({ch for t in texts for ch in SPACE.join(t.split())})
    units = [BLANK, UNK] + [c for c in chars if c not in (BLANK, UNK, SOS_EOS)] + [SOS_EOS]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.model"):
        old.unlink()
    path = out_dir / "units.txt"
    path.write_text("".join(f"{u} {i}\n" for i, u in enumerate(units)), encoding="utf-8")
    return path
