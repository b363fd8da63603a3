"""read_checkpoint treats a checkpoint as untrusted input: tensors and plain values load, a pickle
that would build an arbitrary object (and so could run code) is refused with a clear error."""

import pytest
import torch

from asr.train.checkpoint import read_checkpoint


def test_plain_checkpoint_loads(tmp_path):
    path = tmp_path / "plain.ckpt"
    torch.save({"state_dict": {"model.w": torch.ones(2)}, "hyper_parameters": {"lr": 1e-3, "name": "x"}}, path)
    loaded = read_checkpoint(path)
    assert torch.equal(loaded["state_dict"]["model.w"], torch.ones(2)) and loaded["hyper_parameters"]["name"] == "x"


class CallbackState:
    """Any class of its own: unpickling it means importing and calling code named by the file."""

    def __init__(self) -> None:
        self.best = 0.5


def test_a_checkpoint_that_needs_code_is_refused(tmp_path):
    path = tmp_path / "code.ckpt"
    torch.save({"state_dict": {}, "callbacks": CallbackState()}, path)
    with pytest.raises(ValueError, match="refused: loading it could run code"):
        read_checkpoint(path)


def test_missing_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_checkpoint(tmp_path / "nope.ckpt")
