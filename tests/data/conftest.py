"""Session fixtures of the pipeline tests: the tiny corpus (tests/conftest.py) as Shar shards, its texts and
tokenizers."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from asr.data.manifest import read_cuts
from asr.data.tokenizer import train_sentencepiece, write_char_units


@pytest.fixture(scope="session", autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_shar(tiny_corpus, tmp_path_factory) -> Path:
    """The tiny train split as Lhotse Shar shards of 4 cuts."""
    from asr.data.shar import write_shar

    out = tmp_path_factory.mktemp("shar") / "train"
    write_shar(read_cuts(tiny_corpus / "cuts_train.jsonl.gz", lazy=True), out, shard_size=4)
    return out


@pytest.fixture(scope="session")
def tiny_texts(tiny_corpus) -> list[str]:
    return [c.supervisions[0].text for c in read_cuts(tiny_corpus / "cuts_train.jsonl.gz")]


@pytest.fixture(scope="session")
def spm_dir(tiny_corpus, tiny_texts, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("spm")
    train_sentencepiece(tiny_texts * 3, out, vocab_size=48)
    return out


@pytest.fixture(scope="session")
def char_dir(tiny_texts, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("char")
    write_char_units(tiny_texts, out)
    return out


