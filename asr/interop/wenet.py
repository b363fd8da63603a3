"""Import a Wenet released-model folder as a checkpoint every script here takes with ``--checkpoint``.

A Wenet U2/U2++ release is a folder with ``final.pt`` (the model's state dict), ``train.yaml``,
``global_cmvn`` (JSON ``{"mean_stat", "var_stat", "frame_num"}`` or Kaldi's text matrix),
``units.txt`` (``<blank> 0``, ..., ``<sos/eos>`` last) and, for English, ``bpe.model``.
:func:`import_wenet` maps it onto this toolkit's ``AsrModel`` (``asr.interop.wenet_config``
for train.yaml, ``asr.interop.wenet_weights`` for the tensors) and :func:`write_checkpoint`
saves what ``asr.train.checkpoint.load_model`` reads: the model kwargs, the state dict, the
tokenizer files (Wenet's token ids unchanged) and the feature options Wenet computed its
fbank with (``hyper_parameters["features"]``, the names of ``asr.data.features``).

Every released layout: Wenet 3.x names its tokenizer in train.yaml; 2.x saved no tokenizer keys
(the BPE model was a command-line argument) and keeps ``cmvn_file`` at the top level; 1.x holds
its fbank options in ``collate_conf``. Where train.yaml does not say, a ``bpe.model`` in the folder
means BPE units and word-piece units without one are refused: a wrong guess would turn every
fine-tuning target into ``<unk>``. A ``final.pt`` that wraps its state dict (``{"model": sd,
"epoch": ...}``, ``state_dict``) is unwrapped, with a note.

The imported model computes Wenet's function: position scheme ``wenet_rel`` for ``rel_pos``
(``abs_sin`` for ``abs_pos``), the causal conv module padded at its input as Wenet pads it,
a batch-norm conv module folded into its depthwise conv. ``final.pt`` is untrusted input:
it is read with ``torch.load(weights_only=True)``, so a pickle that needs code to load is refused.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml

from asr.interop.wenet_config import WenetImportError, WenetModelConfig, read_train_config
from asr.interop.wenet_weights import map_state_dict
from asr.train.checkpoint_file import CheckpointError, read_torch_file

REQUIRED_FILES = ("final.pt", "train.yaml", "units.txt")
CMVN_NAME = "global_cmvn"
BPE_NAME = "bpe.model"
# Keys under which training checkpoints keep the model's state dict (Wenet's own and common wrappers).
WRAPPER_KEYS = ("model", "state_dict")
# CMVN from the global_cmvn file and from final.pt's buffers must agree this closely.
CMVN_TOLERANCE = 1e-3


@dataclass
class WenetImport:
    """An imported model: our state dict and kwargs, the tokenizer files, what was noted on the way."""

    config: WenetModelConfig
    state_dict: dict[str, torch.Tensor]
    tokenizer_files: dict[str, bytes]
    source: Path
    notes: list[str]


def load_wenet_state_dict(path: Path, notes: list[str] | None = None) -> dict[str, torch.Tensor]:
    """final.pt as {name: tensor}; refuses pickles that need code and files that are not Wenet state dicts.

    A state dict saved inside a training checkpoint (``{"model": sd, "epoch": ...}`` or under
    ``state_dict``) is taken out of it, said in ``notes``."""
    try:
        data = read_torch_file(path)
    except CheckpointError as err:  # missing, truncated, not torch's, carrying code: named in one line
        raise WenetImportError(str(err)) from None
    data = _unwrap(path, data, notes if notes is not None else [])
    if not isinstance(data, dict) or not data or not all(isinstance(v, torch.Tensor) for v in data.values()):
        keys = sorted(data)[:5] if isinstance(data, dict) else type(data).__name__
        raise WenetImportError(f"{path}: not a Wenet checkpoint (expected a state dict of tensors, got {keys}).")
    if all(k.startswith("module.") for k in data):  # saved from a DDP wrapper
        data = {k[len("module."):]: v for k, v in data.items()}
    if "ctc.ctc_lo.weight" not in data or not any(k.startswith("encoder.") for k in data):
        raise WenetImportError(f"{path}: not a Wenet ASR checkpoint (no ctc.ctc_lo.weight / encoder.* tensors; "
                               f"keys start {sorted(data)[:3]}).")
    return data


def _is_tensor_dict(value: Any) -> bool:
    return isinstance(value, dict) and bool(value) and all(isinstance(v, torch.Tensor) for v in value.values())


def _unwrap(path: Path, data: Any, notes: list[str]) -> Any:
    """The state dict inside a checkpoint that wraps it (``model`` or ``state_dict`` key); ``data`` otherwise."""
    if not isinstance(data, dict) or _is_tensor_dict(data):
        return data
    state = data.get("state_dict")
    if "hyper_parameters" in data and _is_tensor_dict(state) and all(k.startswith("model.") for k in state):
        raise WenetImportError(f"{path}: not a Wenet checkpoint but a Lightning one (hyper_parameters, model.* "
                               "tensors): a checkpoint of this toolkit is used as it is, with --checkpoint.")
    for key in WRAPPER_KEYS:
        if _is_tensor_dict(data.get(key)):
            others = sorted(str(k) for k in data if k != key)
            notes.append(f"{path.name}: the state dict is wrapped under {key!r} (beside {others[:5]}); "
                         "only its tensors were read")
            return data[key]
    return data


def read_units(path: Path) -> list[str]:
    """units.txt as the list of units by id (``unit id`` lines, ids 0..V-1 without gaps)."""
    units: dict[int, str] = {}
    for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            raise WenetImportError(f"{path}:{line_no}: expected 'unit id', got {line!r}.")
        if int(parts[1]) in units:  # a later line would silently take the id of an earlier unit
            raise WenetImportError(f"{path}:{line_no}: id {parts[1]} repeats (also {units[int(parts[1])]!r}).")
        units[int(parts[1])] = parts[0]
    if sorted(units) != list(range(len(units))):
        raise WenetImportError(f"{path}: ids must be 0..{len(units) - 1} without gaps or repeats.")
    return [units[i] for i in range(len(units))]


def read_cmvn(path: Path, is_json: bool | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, istd) from Wenet's JSON stats or Kaldi's text matrix, as Wenet computes them.

    Both hold per-dimension sums of x and x^2 and a frame count; variance is floored at 1e-20.
    """
    raw = path.read_bytes()
    if raw[:2] == b"\0B":
        raise WenetImportError(f"{path}: binary Kaldi CMVN is not supported (Wenet reads the text form only: "
                               "compute-cmvn-stats --binary=false).")
    text = raw.decode("utf-8", errors="replace").strip()
    looks_json = text.startswith("{")
    if is_json is not None and bool(is_json) != looks_json:
        raise WenetImportError(f"{path}: train.yaml says is_json_cmvn={is_json} but the file "
                               f"{'is' if looks_json else 'is not'} JSON.")
    try:
        if looks_json:
            stats = json.loads(text)
            sums, squares, count = stats["mean_stat"], stats["var_stat"], float(stats["frame_num"])
        else:
            numbers = text.split()
            if numbers[0] != "[" or numbers[-1] != "]" or len(numbers) % 2 != 0:
                raise ValueError("expected '[ sums count sums_of_squares 0 ]'")
            dim = (len(numbers) - 4) // 2
            values = [float(v) for v in numbers[1:-1]]
            sums, count, squares = values[:dim], values[dim], values[dim + 1 : 2 * dim + 1]
    except (KeyError, ValueError, IndexError, TypeError) as err:
        raise WenetImportError(f"{path}: not a Wenet CMVN file ({type(err).__name__}: {err}).") from None
    if count <= 0 or len(sums) != len(squares):
        raise WenetImportError(f"{path}: bad CMVN stats ({len(sums)} sums, {len(squares)} squares, count {count}).")
    mean = [s / count for s in sums]
    istd = [1.0 / math.sqrt(max(q / count - m * m, 1e-20)) for q, m in zip(squares, mean)]
    return torch.tensor(mean, dtype=torch.float32), torch.tensor(istd, dtype=torch.float32)


def _find(folder: Path, configured: str | None, default: str) -> Path | None:
    """A file Wenet's train.yaml names by its training-machine path: look for it in the folder."""
    for name in (default, Path(configured).name if configured else None):
        if name and (folder / name).is_file():
            return folder / name
    return None


def _cmvn(folder: Path, cfg: WenetModelConfig, tensors: dict[str, torch.Tensor], notes: list[str]) -> None:
    """Make sure final.pt's CMVN buffers exist and agree with the global_cmvn file when both are there."""
    path = _find(folder, cfg.cmvn_file, CMVN_NAME)
    keys = ("encoder.global_cmvn.mean", "encoder.global_cmvn.istd")
    dim = cfg.model_kwargs["encoder_kwargs"]["input_dim"]
    if path is not None:
        mean, istd = read_cmvn(path, cfg.cmvn_is_json)
        if mean.shape != (dim,):
            raise WenetImportError(f"{path}: {mean.numel()} CMVN dimensions for input_dim {dim}.")
        if all(k in tensors for k in keys):
            worst = max(float((tensors[k].float() - v).abs().max() / (v.abs().max() + 1e-12))
                        for k, v in zip(keys, (mean, istd)))
            if worst > CMVN_TOLERANCE:
                raise WenetImportError(f"{path} disagrees with final.pt's encoder.global_cmvn buffers (relative "
                                       f"difference {worst:.3g}): is it this model's file?")
            notes.append(f"{path.name}: agrees with final.pt's CMVN buffers (relative difference {worst:.1e})")
        else:
            tensors[keys[0]], tensors[keys[1]] = mean, istd
            notes.append(f"CMVN from {path.name} (final.pt holds no encoder.global_cmvn buffers)")
    elif not all(k in tensors for k in keys):
        if cfg.cmvn_file:
            raise WenetImportError(f"train.yaml names a CMVN file ({cfg.cmvn_file}) but neither {CMVN_NAME} nor "
                                   "final.pt's encoder.global_cmvn buffers are there.")
        tensors[keys[0]], tensors[keys[1]] = torch.zeros(dim), torch.ones(dim)
        notes.append("no global CMVN (train.yaml has none): features enter the model unnormalized")


def looks_like_word_pieces(units: list[str]) -> list[str]:
    """The units that only a BPE / unigram model makes: a word-start marker followed by more text
    ("▁THE"); a char model's units are single characters, its space "▁" alone, or tags like "<noise>"."""
    from asr.data.tokenizer import SPACE

    return [u for u in units if u.startswith(SPACE) and len(u) > 1]


def resolve_tokenizer(folder: Path, cfg: WenetModelConfig, units: list[str], notes: list[str]) -> str:
    """``bpe`` or ``char``: what train.yaml says; where it says nothing (Wenet before 3.0), a
    ``bpe.model`` in the folder means BPE, and word-piece units without one are refused."""
    bpe = _find(folder, cfg.bpe_file, BPE_NAME)
    if cfg.tokenizer is not None:
        if cfg.tokenizer == "char" and bpe is not None:
            notes.append(f"train.yaml says tokenizer: char; {bpe.name} in the folder is not used")
        return cfg.tokenizer
    if bpe is not None:
        notes.append(f"train.yaml names no tokenizer (Wenet before 3.0); {bpe.name} is in the folder: BPE units")
        return "bpe"
    pieces = looks_like_word_pieces(units)
    if pieces:
        raise WenetImportError(
            f"train.yaml names no tokenizer and {folder} has no {BPE_NAME}, but units.txt holds word pieces "
            f"({', '.join(pieces[:3])}, ...): without the model that made them, text cannot be split into these "
            f"units; put the BPE model beside final.pt as {BPE_NAME}.")
    notes.append("train.yaml names no tokenizer and there is no bpe.model: units.txt holds characters (char units)")
    return "char"


def _tokenizer_files(folder: Path, cfg: WenetModelConfig, units: list[str]) -> dict[str, bytes]:
    """units.txt (+ bpe.model): what ``asr.data.tokenizer.load_tokenizer`` reads as Wenet's layout."""
    from asr.data.tokenizer import BLANK, SOS_EOS, UNK

    want = {0: BLANK, 1: UNK, len(units) - 1: SOS_EOS}
    wrong = {i: units[i] for i, unit in want.items() if units[i] != unit}
    if wrong:
        raise WenetImportError(f"units.txt: special units must be {want}, got {wrong}.")
    files = {"units.txt": (folder / "units.txt").read_bytes()}
    if cfg.tokenizer == "bpe":
        bpe = _find(folder, cfg.bpe_file, BPE_NAME)
        if bpe is None:
            raise WenetImportError(f"train.yaml uses a bpe tokenizer but {folder / BPE_NAME} is missing.")
        files[BPE_NAME] = bpe.read_bytes()
    return files


def import_wenet(folder: str | Path) -> WenetImport:
    """Read and map a Wenet model folder; ``WenetImportError`` (one line) for anything it cannot map."""
    folder = Path(folder)
    if not folder.is_dir():
        raise WenetImportError(f"{folder} is not a folder (expected a Wenet model folder with "
                               f"{', '.join(REQUIRED_FILES)}).")
    missing = [name for name in REQUIRED_FILES if not (folder / name).is_file()]
    if missing:
        raise WenetImportError(f"{folder}: missing {', '.join(missing)} (a Wenet model folder has "
                               f"{', '.join(REQUIRED_FILES)}, {CMVN_NAME} and, for BPE units, {BPE_NAME}).")
    notes: list[str] = []
    tensors = load_wenet_state_dict(folder / "final.pt", notes)
    try:
        train_yaml = yaml.safe_load((folder / "train.yaml").read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise WenetImportError(f"{folder / 'train.yaml'}: not valid YAML ({str(err).splitlines()[0]}).") from None
    ctc_rows = tensors["ctc.ctc_lo.weight"].size(0)
    cfg = read_train_config(train_yaml, ctc_rows)
    units = read_units(folder / "units.txt")
    if len(units) != ctc_rows:
        raise WenetImportError(f"units.txt has {len(units)} units but the CTC layer of final.pt has {ctc_rows} "
                               "outputs: they belong to different models.")
    notes = list(cfg.notes) + notes
    cfg.tokenizer = resolve_tokenizer(folder, cfg, units, notes)
    _cmvn(folder, cfg, tensors, notes)
    files = _tokenizer_files(folder, cfg, units)
    state = map_state_dict(tensors, cfg)
    return WenetImport(cfg, state, files, folder, notes)


def write_checkpoint(imported: WenetImport, out: str | Path) -> Path:
    """Save ``imported`` as a checkpoint ``asr.train.checkpoint.load_model`` (and so decode.py, stream.py,
    serve.py, export.py and train.py ``init_from``) reads."""
    from asr.train.checkpoint import TOKENIZER_KEY

    cfg = imported.config
    checkpoint: dict[str, Any] = {
        "hyper_parameters": {
            "model_kwargs": cfg.model_kwargs,
            "tokenizer_path": str(imported.source / "units.txt"),
            "features": dict(cfg.features),
            "cfg": {"imported_from": {"toolkit": "wenet", "folder": str(imported.source.resolve())}},
            "wenet_import_notes": list(imported.notes),
        },
        "state_dict": {f"model.{k}": v for k, v in imported.state_dict.items()},
        TOKENIZER_KEY: {"name": "tokenizer", "is_dir": True, "files": dict(imported.tokenizer_files)},
        "global_step": 0,
    }
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(checkpoint, out)
    return out


def describe(imported: WenetImport) -> str:
    """A short human summary of what was imported (the script prints it)."""
    kw = imported.config.model_kwargs
    enc = kw["encoder_kwargs"]
    params = sum(v.numel() for k, v in imported.state_dict.items() if not k.startswith("encoder.cmvn"))
    lines = [
        f"imported {imported.source}: {params / 1e6:.1f} M parameters",
        f"  encoder : conformer, {enc['num_layers']} layers, d_model {enc['d_model']}, {enc['num_heads']} heads, "
        f"pos_enc {enc['pos_enc']}, subsampling {enc['subsampling']}, conv kernel {enc['conv_kernel']} "
        f"({'causal' if enc['causal'] else 'non-causal'}, conv norm {enc['conv_norm']})",
        f"  decoder : {kw['decoder_layers']} layers" + (f" + right-to-left {kw['r2l_decoder_layers']}"
                                                        if kw['r2l_decoder_layers'] else ""),
        f"  tokens  : {kw['vocab_size']} ({imported.config.tokenizer}; Wenet's ids: <blank> 0, <sos/eos> "
        f"{kw['sos_eos_id']})",
        f"  features: {imported.config.features}",
    ]
    lines += [f"  note    : {n}" for n in imported.notes]
    return "\n".join(lines)
