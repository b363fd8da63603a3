"""A checkpoint is untrusted input, read by one reader wherever it is given: each kind of bad file is
one line naming what is wrong (exit code 2 from every script), never a traceback, never torch's
advice to set weights_only=False, never a warning printed before the line. Averaging refuses inputs
that are not one model."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from asr.data.tokenizer import load_tokenizer, write_char_units
from asr.interop.wenet import load_wenet_state_dict
from asr.interop.wenet_config import WenetImportError
from asr.model.asr_model import build_asr_model
from asr.train.checkpoint import (TOKENIZER_KEY, average_checkpoints, load_model, pack_tokenizer, read_checkpoint,
                                  write_averaged_checkpoint)
from asr.train.checkpoint_file import PROBLEMS, CheckpointError, read_torch_file
from asr.train.init_from import read_source
from asr.cli import average_checkpoints as average_script
from asr.cli import decode as decode_script
from asr.cli import export as export_script
from asr.cli import serve as serve_script
from asr.cli import stream as stream_script

ROOT = Path(__file__).resolve().parents[2]

KWARGS = dict(encoder_kwargs=dict(pos_enc="rel_xl", input_dim=80, d_model=16, num_heads=2, num_layers=1, ffn_dim=32,
                                  conv_kernel=3, causal=True),
              decoder_layers=1, decoder_heads=2, decoder_ffn_dim=32)


class Payload:
    """Unpickling it calls print: what a file that carries code would do with os.system."""

    def __reduce__(self):
        return (print, ("this ran at load time",))


def model_checkpoint(units: Path, seed: int = 0, **changes) -> dict:
    tok = load_tokenizer(units)
    kwargs = dict(vocab_size=tok.vocab_size, sos_eos_id=tok.sos_eos_id, blank_id=tok.blank_id, **{**KWARGS, **changes})
    torch.manual_seed(seed)
    model = build_asr_model(**kwargs)
    return {"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
            "hyper_parameters": {"model_kwargs": kwargs, "cfg": {}}, TOKENIZER_KEY: pack_tokenizer(units)}


def flip_middle_byte(data: bytes) -> bytes:
    out = bytearray(data)
    out[len(out) // 2] ^= 0xFF
    return bytes(out)


# name -> the kind of problem load_model names
KINDS = {
    "missing": "missing", "empty": "empty", "truncated": "truncated", "damaged": "truncated",
    "random": "not_a_checkpoint", "text": "not_a_checkpoint", "torchscript": "not_a_checkpoint",
    "plain_pickle": "not_a_checkpoint", "folder": "not_a_checkpoint",
    "code": "carries_code", "code_plain_pickle": "carries_code",
    "not_ours": "not_ours", "bare_state_dict": "not_ours", "no_model_kwargs": "not_ours",
    "foreign_kwargs": "foreign_architecture", "foreign_shapes": "foreign_architecture",
    "other_vocab": "foreign_architecture",
    "empty_state": "no_weights", "nonfinite": "nonfinite", "no_tokenizer": "no_tokenizer",
}
FILE_KINDS = [n for n, k in KINDS.items() if k in ("missing", "empty", "truncated", "not_a_checkpoint", "carries_code")]


@pytest.fixture(scope="module")
def zoo(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("zoo")
    units = write_char_units(["abc de"], out / "tok")
    good = model_checkpoint(units)
    torch.save(good, out / "good.ckpt")
    data = (out / "good.ckpt").read_bytes()
    files = {name: out / f"{name}.ckpt" for name in KINDS}
    files["folder"] = out / "tok"
    files["empty"].write_bytes(b"")
    files["truncated"].write_bytes(data[: len(data) // 2])
    files["damaged"].write_bytes(flip_middle_byte(data))  # a byte of a tensor: torch itself reads it silently
    files["random"].write_bytes(b"\0" + np.random.default_rng(0).bytes(4095))
    files["text"].write_text("model: conformer\nlayers: 12\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit's own notice: exports still write these
        torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), files["torchscript"])
    with open(files["plain_pickle"], "wb") as fh:
        pickle.dump({"weights": [1.0, 2.0]}, fh)  # protocol 4: torch warns about it before failing
    torch.save({**good, "callbacks": Payload()}, files["code"])
    with open(files["code_plain_pickle"], "wb") as fh:
        pickle.dump({**good, "callbacks": Payload()}, fh)
    torch.save({"model": {"w": torch.ones(2)}, "epoch": 3}, files["not_ours"])
    torch.save(build_asr_model(**good["hyper_parameters"]["model_kwargs"]).state_dict(), files["bare_state_dict"])
    torch.save({**good, "hyper_parameters": {"cfg": {}}}, files["no_model_kwargs"])
    kwargs = good["hyper_parameters"]["model_kwargs"]
    torch.save({**good, "hyper_parameters": {"model_kwargs": {**kwargs, "joiner_dim": 512}}}, files["foreign_kwargs"])
    wider = {**kwargs, "encoder_kwargs": {**kwargs["encoder_kwargs"], "d_model": 32}}
    torch.save({**good, "hyper_parameters": {"model_kwargs": wider}}, files["foreign_shapes"])
    torch.save({**good, TOKENIZER_KEY: pack_tokenizer(write_char_units(["xyz"], out / "other"))}, files["other_vocab"])
    torch.save({**good, "state_dict": {}}, files["empty_state"])
    broken = dict(good["state_dict"])
    broken["model.ctc_proj.bias"] = broken["model.ctc_proj.bias"].clone().fill_(float("nan"))
    torch.save({**good, "state_dict": broken}, files["nonfinite"])
    torch.save({**{k: v for k, v in good.items() if k != TOKENIZER_KEY},
                "hyper_parameters": {**good["hyper_parameters"], "tokenizer_path": str(out / "gone")}},
               files["no_tokenizer"])
    files["good"] = out / "good.ckpt"
    return files


def assert_one_line_naming(message: str, path: Path, kind: str) -> None:
    assert "\n" not in message.strip() and message.strip()
    assert PROBLEMS[kind].format(path=repr(str(path))) in message
    assert "weights_only" not in message and "Traceback" not in message


@pytest.mark.parametrize("name", KINDS)
def test_the_reader_names_each_kind_of_bad_file_in_one_line_and_warns_nothing(zoo, name):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(CheckpointError) as err:
            load_model(zoo[name])
    assert err.value.kind == KINDS[name] and isinstance(err.value, ValueError)
    assert_one_line_naming(str(err.value), zoo[name], KINDS[name])
    assert not caught, [str(w.message) for w in caught]


def test_what_is_not_a_pickle_is_not_called_code(zoo):
    for name in ("random", "text", "plain_pickle", "torchscript"):
        with pytest.raises(CheckpointError) as err:
            read_torch_file(zoo[name])
        assert "code" not in str(err.value), str(err.value)
    with pytest.raises(CheckpointError, match="its pickle names builtins.print"):
        read_torch_file(zoo["code_plain_pickle"])


def test_a_good_checkpoint_loads(zoo):
    model, tok, cfg = load_model(zoo["good"])
    assert tok.vocab_size == model.ctc_proj.out_features and cfg.features["num_mel_bins"] == 80
    assert torch.equal(read_checkpoint(zoo["good"])["state_dict"]["model.ctc_proj.bias"], model.ctc_proj.bias)


@pytest.fixture
def restore_threads():
    """serve.py and export.py set torch's thread count for their process."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def _exit_code(call) -> int:
    try:
        return call()
    except SystemExit as stop:
        return stop.code


ENTRY_POINTS = {
    "decode": lambda p, tmp: decode_script.main(["--checkpoint", str(p), "--cuts", str(tmp / "cuts.jsonl.gz")]),
    "stream": lambda p, tmp: stream_script.main(["--checkpoint", str(p), str(tmp / "a.wav")]),
    "serve": lambda p, tmp: serve_script.main(["--checkpoint", str(p), "--port", "0"]),
    "export": lambda p, tmp: export_script.main(["--checkpoint", str(p), "--out-dir", str(tmp / "e"),
                                                 "--format", "torchscript"]),
    "export_sherpa": lambda p, tmp: export_script.main(["--checkpoint", str(p), "--out-dir", str(tmp / "s"),
                                                        "--format", "sherpa-onnx"]),
}


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_every_entry_point_refuses_every_bad_file_with_one_line_and_exit_2(zoo, entry, tmp_path, capsys,
                                                                            restore_threads):
    for name, kind in KINDS.items():
        assert _exit_code(lambda: ENTRY_POINTS[entry](zoo[name], tmp_path)) == 2, name
        err = capsys.readouterr().err
        assert_one_line_naming(err, zoo[name], kind)


def test_init_from_and_the_wenet_importer_take_the_same_reader(zoo):
    for name, kind in KINDS.items():
        with pytest.raises(CheckpointError) as err:
            read_source(zoo[name])
        assert err.value.kind == kind
    for name in FILE_KINDS:  # a Wenet final.pt is a bare state dict: the file-level kinds apply
        with pytest.raises(WenetImportError) as err:
            load_wenet_state_dict(zoo[name])
        assert_one_line_naming(str(err.value), zoo[name], KINDS[name])


def test_averaging_refuses_every_bad_input_first_or_last(zoo, tmp_path, capsys):
    out = tmp_path / "avg.ckpt"
    for name, kind in KINDS.items():
        for pair in ([zoo[name], zoo["good"]], [zoo["good"], zoo[name]]):
            code = _exit_code(lambda: average_script.main(["--checkpoint", *map(str, pair), "--out", str(out)]))
            assert code == 2, (name, pair)
            assert_one_line_naming(capsys.readouterr().err, zoo[name], kind)
            assert not out.exists()


def test_averaging_refuses_checkpoints_of_another_model(zoo, tmp_path):
    units = tmp_path / "tok" / "units.txt"
    units.parent.mkdir()
    units.write_bytes((zoo["folder"] / "units.txt").read_bytes())
    good = torch.load(zoo["good"], weights_only=True)
    later = model_checkpoint(units, seed=1)  # the same model after more training: averaged
    torch.save(later, tmp_path / "later.ckpt")
    averaged = average_checkpoints([zoo["good"], tmp_path / "later.ckpt"])
    key = "model.ctc_proj.weight"
    assert torch.allclose(averaged[key], (good["state_dict"][key] + later["state_dict"][key]) / 2)
    other_features = {**later, "hyper_parameters": {**later["hyper_parameters"], "features": {"num_mel_bins": 80,
                                                                                            "dither": 0.1}}}
    torch.save(other_features, tmp_path / "features.ckpt")
    deeper = model_checkpoint(units, decoder_ffn_dim=64)
    torch.save(deeper, tmp_path / "deeper.ckpt")
    extra = {**later, "state_dict": {**later["state_dict"], "extra.w": torch.ones(2)}}
    torch.save(extra, tmp_path / "extra.ckpt")
    for name, match in [("features", r"its features differ .* \(features: \{'num_mel_bins': 80, 'dither': 0.1\} "
                                      r"here, None there\)"),
                        ("deeper", r"its model_kwargs differ .* \(model_kwargs.decoder_ffn_dim: 64 here, 32 there\)"),
                        ("extra", r"its tensors differ .*: 1 not in the first \(extra.w\)")]:
        with pytest.raises(CheckpointError, match=match):
            write_averaged_checkpoint([zoo["good"], tmp_path / f"{name}.ckpt"], tmp_path / "avg.ckpt")
        assert not (tmp_path / "avg.ckpt").exists()


def test_a_script_exits_2_with_one_line_and_no_warning(zoo):
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "decode.py"), "--checkpoint",
                          str(zoo["plain_pickle"])], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONWARNINGS": "always"})
    assert res.returncode == 2, res.stderr
    assert res.stderr == f"decode: {str(zoo['plain_pickle'])!r} is not a checkpoint: its pickle is not one " \
                         "torch.save writes\n"
