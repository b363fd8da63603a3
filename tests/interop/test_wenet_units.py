"""units.txt states each unit's id: the importer keeps those ids, whatever order the lines come in."""

from __future__ import annotations

import random

import pytest
import torch

from asr.interop.wenet import import_wenet, read_units, write_checkpoint
from asr.interop.wenet_config import WenetImportError
from asr.train.checkpoint import load_model
from tests.interop import wenet_layout as wl


def write_units(path, lines):
    path.write_text("".join(f"{unit} {i}\n" for unit, i in lines), encoding="utf-8")


def test_units_are_read_by_the_ids_they_state_not_by_line(tmp_path):
    lines = list(zip(wl.UNITS, range(len(wl.UNITS))))
    random.Random(0).shuffle(lines)
    assert [i for _, i in lines] != sorted(i for _, i in lines)
    write_units(tmp_path / "units.txt", lines)
    assert read_units(tmp_path / "units.txt") == wl.UNITS


def test_an_imported_model_keeps_each_units_id_from_a_shuffled_units_file(tmp_path):
    cfg = wl.config()
    sd = wl.state_dict(cfg)
    folder = wl.write_folder(tmp_path / "wenet", cfg, sd)
    lines = list(zip(wl.UNITS, range(len(wl.UNITS))))[::-1]  # <sos/eos> on the first line, <blank> on the last
    write_units(folder / "units.txt", lines)
    model, tokenizer, _ = load_model(write_checkpoint(import_wenet(folder), tmp_path / "imported.ckpt"))
    assert [tokenizer.id_to_piece(i) for i in range(tokenizer.vocab_size)] == wl.UNITS
    assert tokenizer.encode("bad") == [wl.UNITS.index(c) for c in "bad"]
    assert torch.equal(model.ctc_proj.weight, sd["ctc.ctc_lo.weight"])  # row i is still unit i's


def test_an_id_stated_twice_is_refused(tmp_path):
    write_units(tmp_path / "units.txt", [("<blank>", 0), ("<unk>", 1), ("a", 2), ("b", 2), ("<sos/eos>", 3)])
    with pytest.raises(WenetImportError, match="repeat"):
        read_units(tmp_path / "units.txt")
