"""Rebuilding models from Lightning checkpoints, without Hydra; checkpoint averaging.

A training checkpoint carries everything needed to use the model elsewhere:

- ``hyper_parameters["model_kwargs"]``: the plain keyword arguments of
  ``asr.model.asr_model.build_asr_model`` (vocab size and special ids included, as read
  from the tokenizer model when training started);
- ``hyper_parameters["cfg"]``: the resolved training config (data dir, chunk settings);
- ``hyper_parameters["features"]``: the fbank options the model was trained with
  (``asr.data.features.FeatureConfig.to_dict()``); :func:`load_model` returns them as
  ``cfg.features``, ``LEGACY`` (``num_mel_bins`` = the encoder's ``input_dim``) for checkpoints
  written before they were recorded, so every frontend builds the model's own frames:
  ``FeatureConfig.from_dict(cfg.features)``;
- ``hyper_parameters["scheduler"]``, ``["streaming"]``, ``["seed"]``: the settings the
  LightningModule was built with, under their YAML names (``asr.train.config``).
  Checkpoints written before these were stored lack them; nothing here reads them, so
  such checkpoints still load and resume unchanged;
- ``asr_tokenizer_files``: the bytes of the tokenizer files, so a checkpoint copied to
  another machine still decodes to text.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from asr.train.checkpoint_file import CheckpointError, read_torch_file

TOKENIZER_KEY = "asr_tokenizer_files"
_MODEL_PREFIX = "model."


def model_kwargs_from_config(model_cfg: dict, pos_enc_cfg: dict, tokenizer: Any) -> dict:
    """Plain ``build_asr_model`` kwargs from the ``model`` and ``pos_enc`` config groups.

    ``pos_enc_cfg`` is ``{"name": scheme, **scheme options}``; vocab size and the
    special ids come from the tokenizer, never from YAML.
    """
    model_cfg, pos_enc_cfg = dict(model_cfg), dict(pos_enc_cfg)
    if "name" not in pos_enc_cfg:
        raise ValueError(f"pos_enc config {pos_enc_cfg} has no 'name' (the position scheme).")
    scheme = pos_enc_cfg.pop("name")
    encoder_kwargs = {**dict(model_cfg.pop("encoder")), "pos_enc": scheme, **pos_enc_cfg}
    return {
        "vocab_size": int(tokenizer.vocab_size),
        "sos_eos_id": int(tokenizer.sos_eos_id),
        "blank_id": int(tokenizer.blank_id),
        "encoder_kwargs": encoder_kwargs,
        **model_cfg,
    }


def pack_tokenizer(tokenizer_path: str | Path) -> dict:
    """``{"name": str, "is_dir": bool, "files": {file name: bytes}}`` for a tokenizer
    model file or a tokenizer folder (its ``*.model`` / ``units.txt``)."""
    path = Path(tokenizer_path)
    if path.is_dir():
        # Only what load_tokenizer reads: the folder may also hold the (large) training text.
        files = {p.name: p.read_bytes() for p in sorted(path.iterdir())
                 if p.is_file() and (p.suffix == ".model" or p.name == "units.txt")}
    elif path.is_file():
        files = {path.name: path.read_bytes()}
    else:
        raise FileNotFoundError(f"tokenizer path {str(path)!r} does not exist.")
    return {"name": path.name, "is_dir": path.is_dir(), "files": files}


def unpack_tokenizer(packed: dict) -> Any:
    """Load the tokenizer stored by :func:`pack_tokenizer` (via a temporary folder)."""
    from asr.data.tokenizer import load_tokenizer

    with tempfile.TemporaryDirectory(prefix="asr_tok_") as tmp:
        folder = Path(tmp) / packed["name"] if packed["is_dir"] else Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for name, data in packed["files"].items():
            (folder / name).write_bytes(data)
        return load_tokenizer(folder if packed["is_dir"] else folder / packed["name"])


def read_checkpoint(ckpt_path: str | Path) -> dict:
    """A Lightning checkpoint (a dict whose ``state_dict`` holds tensors), read on the CPU.

    A checkpoint is untrusted input: ``weights_only=True`` unpickles tensors and plain containers only,
    never code. Ours hold nothing else (state dicts, hyper-parameters as plain YAML values, callback
    and loop state). Any other file is a one-line :class:`CheckpointError` naming why
    (``asr.train.checkpoint_file``).
    """
    checkpoint = read_torch_file(ckpt_path)
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("state_dict"), dict):
        raise CheckpointError(ckpt_path, "not_ours", f"no state_dict ({_outline(checkpoint)}); a Wenet model is "
                                                     "imported with scripts/import_wenet.py first")
    odd = [str(k) for k, v in checkpoint["state_dict"].items() if not isinstance(v, torch.Tensor)]
    if odd:
        raise CheckpointError(ckpt_path, "not_ours", f"{len(odd)} entries of its state_dict are not tensors "
                                                     f"({_listed(odd)})")
    return checkpoint


def _outline(data: Any) -> str:
    """A few words on what a file holds instead of a checkpoint: its type, or its first keys."""
    if not isinstance(data, dict):
        return f"it holds a {type(data).__name__}"
    keys = sorted(map(str, data))
    if keys and all(isinstance(v, torch.Tensor) for v in data.values()):
        return f"a bare state dict of {len(keys)} tensors: {_listed(keys)}"
    return f"keys {_listed(keys)}" if keys else "an empty dict"


def model_kwargs_of(checkpoint: dict, ckpt_path: str | Path) -> dict:
    """``hyper_parameters["model_kwargs"]`` of a checkpoint of this toolkit; CheckpointError without them."""
    hparams = checkpoint.get("hyper_parameters")
    kwargs = hparams.get("model_kwargs") if isinstance(hparams, dict) else None
    if not isinstance(kwargs, dict):
        raise CheckpointError(ckpt_path, "not_ours", "no hyper_parameters['model_kwargs'], so it was not "
                                                     "written by asr.train (a Wenet model: import it with "
                                                     "scripts/import_wenet.py)")
    return kwargs


def check_model_weights(checkpoint: dict, ckpt_path: str | Path) -> torch.nn.Module:
    """The model a checkpoint's ``model_kwargs`` describe, on the meta device (shapes, no values);
    CheckpointError unless it is this toolkit's AsrModel and the checkpoint's weights fit it (names,
    shapes; none empty, none non-finite).

    The meta device allocates nothing: a file's sizes cost no memory until its own tensors are
    shown to fit them.
    """
    from asr.model.asr_model import build_asr_model

    kwargs = model_kwargs_of(checkpoint, ckpt_path)
    state = model_state_dict(checkpoint)
    if not state:
        held = len(checkpoint["state_dict"])
        raise CheckpointError(ckpt_path, "no_weights", "its state_dict is empty" if not held else
                              f"none of the {held} tensors of its state_dict is under '{_MODEL_PREFIX}'")
    try:
        with torch.device("meta"):
            meta = build_asr_model(**kwargs)
    except (TypeError, ValueError, KeyError, AttributeError) as err:
        raise CheckpointError(ckpt_path, "foreign_architecture",
                              f"its model_kwargs do not build this toolkit's AsrModel ({str(err).splitlines()[0]})"
                              ) from None
    differences = state_differences(meta.state_dict(), state)
    if differences:
        raise CheckpointError(ckpt_path, "foreign_architecture",
                              f"its weights do not fit the model its model_kwargs describe: {differences}")
    nonfinite = [k for k, v in state.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if nonfinite:
        raise CheckpointError(ckpt_path, "nonfinite", f"{len(nonfinite)} of its tensors hold NaN or inf "
                                                      f"({_listed(nonfinite)})")
    return meta


def state_differences(expected: dict[str, Any], found: dict[str, Any],
                      names: tuple[str, str] = ("the checkpoint", "the model")) -> str:
    """'' when ``found`` has the names and shapes of ``expected``; else a few words on how they differ
    (``names``: what to call ``found`` and ``expected`` in them)."""
    missing = [k for k in expected if k not in found]
    unexpected = [k for k in found if k not in expected]
    shapes = [k for k in expected if k in found and found[k].shape != expected[k].shape]
    parts = []
    if shapes:
        k = shapes[0]
        parts.append(f"{len(shapes)} of other shapes ({k}: {tuple(found[k].shape)} in {names[0]}, "
                     f"{tuple(expected[k].shape)} in {names[1]})")
    for what, keys in ((f"missing in {names[0]}", missing), (f"not in {names[1]}", unexpected)):
        if keys:
            parts.append(f"{len(keys)} {what} ({_listed(keys)})")
    return "; ".join(parts)


def _listed(names: list[str], shown: int = 3) -> str:
    return ", ".join(names[:shown]) + (" ..." if len(names) > shown else "")


def model_state_dict(checkpoint: dict) -> dict[str, torch.Tensor]:
    """The AsrModel's own state dict (LightningModule prefix ``model.`` removed)."""
    return {
        k[len(_MODEL_PREFIX):]: v for k, v in checkpoint["state_dict"].items() if k.startswith(_MODEL_PREFIX)
    }


def checkpoint_tokenizer(checkpoint: dict, ckpt_path: str | Path) -> Any:
    """The tokenizer a checkpoint carries (else the one at its recorded ``tokenizer_path``)."""
    from asr.data.tokenizer import load_tokenizer

    if TOKENIZER_KEY in checkpoint:
        try:
            return unpack_tokenizer(checkpoint[TOKENIZER_KEY])
        except (KeyError, TypeError, AttributeError, ValueError, RuntimeError, OSError) as err:
            raise CheckpointError(ckpt_path, "truncated", f"its tokenizer files do not load ({type(err).__name__}: "
                                                          f"{str(err).splitlines()[0] if str(err) else ''})") from None
    recorded = checkpoint["hyper_parameters"].get("tokenizer_path")
    if not recorded or not Path(recorded).exists():
        raise CheckpointError(ckpt_path, "no_tokenizer", f"it carries none, and its tokenizer_path ({recorded}) "
                                                         "does not exist here")
    return load_tokenizer(recorded)


def read_model_checkpoint(ckpt_path: str | Path) -> tuple[dict, Any, Any]:
    """(checkpoint, tokenizer, fbank options) of a usable model of this toolkit.

    :func:`read_checkpoint`, then :func:`check_model_weights`; the tokenizer must have one unit per
    model output and the fbank options (``asr.data.features.FeatureConfig``; ``LEGACY`` with one mel
    bin per encoder input when the checkpoint predates their record) one mel bin per encoder input.
    """
    from asr.data.features import FeatureConfig

    checkpoint = read_checkpoint(ckpt_path)
    meta = check_model_weights(checkpoint, ckpt_path)
    tokenizer = checkpoint_tokenizer(checkpoint, ckpt_path)
    if tokenizer.vocab_size != meta.ctc_proj.out_features:
        raise CheckpointError(ckpt_path, "foreign_architecture", f"its tokenizer has {tokenizer.vocab_size} units, "
                                                                 f"its model {meta.ctc_proj.out_features} outputs")
    hparams = checkpoint["hyper_parameters"]
    # Before the record, the frontends used the legacy options with one mel bin per input feature.
    try:
        features = FeatureConfig.from_dict(hparams.get("features", {"num_mel_bins": meta.encoder.input_dim}))
    except (TypeError, ValueError) as err:
        raise CheckpointError(ckpt_path, "foreign_architecture", f"its features are not this toolkit's fbank "
                                                                 f"options ({str(err).splitlines()[0]})") from None
    if features.num_mel_bins != meta.encoder.input_dim:
        raise CheckpointError(ckpt_path, "foreign_architecture", f"features.num_mel_bins ({features.num_mel_bins}) "
                                                                 f"differs from the encoder's input_dim "
                                                                 f"({meta.encoder.input_dim})")
    return checkpoint, tokenizer, features


def load_model(ckpt_path: str | Path) -> tuple[torch.nn.Module, Any, DictConfig]:
    """Rebuild the trained AsrModel (eval mode, CPU), its tokenizer and training config.

    Returns:
        (model, tokenizer, cfg) where cfg is the resolved training config, whose ``features``
        are the model's fbank options (``LEGACY`` when the checkpoint predates their record).
    Raises:
        CheckpointError: the file is not a usable model of this toolkit (:func:`read_model_checkpoint`).
    """
    from asr.model.asr_model import build_asr_model

    checkpoint, tokenizer, features = read_model_checkpoint(ckpt_path)
    model = build_asr_model(**model_kwargs_of(checkpoint, ckpt_path))
    model.load_state_dict(model_state_dict(checkpoint))
    model.eval()
    cfg = OmegaConf.create(checkpoint["hyper_parameters"].get("cfg", {}))
    cfg.features = features.to_dict()  # the record, not a config group the run may have lacked
    return model, tokenizer, cfg


# What makes two checkpoints one model, so that their weights can be averaged: the same architecture,
# the same fbank frames in and the same tokens out.
SAME_MODEL_HPARAMS = ("model_kwargs", "features")


def average_checkpoints(paths: list[str | Path]) -> dict[str, torch.Tensor]:
    """Element-wise mean of the ``state_dict`` of several checkpoints of one model.

    Floating tensors are averaged in float64 and cast back; integer tensors (counters)
    are taken from the last checkpoint. Each input must be a usable model of this toolkit
    (:func:`read_model_checkpoint`) and the first one's model: the same ``model_kwargs``,
    features, tokenizer, tensor names and shapes; else a :class:`CheckpointError` naming the difference.
    """
    return _average(paths)[1]


def _average(paths: list[str | Path]) -> tuple[dict, dict[str, torch.Tensor]]:
    """(the first checkpoint, the averaged state dict); see :func:`average_checkpoints`."""
    if not paths:
        raise ValueError("average_checkpoints needs at least one checkpoint path.")
    first: dict = {}
    total: dict[str, torch.Tensor] = {}
    last: dict[str, torch.Tensor] = {}
    for path in paths:
        checkpoint, _, _ = read_model_checkpoint(path)
        state = checkpoint["state_dict"]
        if not first:
            first = checkpoint
        else:
            _check_same_model(checkpoint, path, first, paths[0])
        for key, value in state.items():
            if value.is_floating_point():
                total[key] = total[key] + value.double() if key in total else value.double()
            else:
                total[key] = value
        last = state
    averaged = {k: (total[k] / len(paths)).to(last[k].dtype) if last[k].is_floating_point() else last[k]
                for k in total}
    return first, averaged


def _check_same_model(checkpoint: dict, path: str | Path, first: dict, first_path: str | Path) -> None:
    """CheckpointError unless ``checkpoint`` holds the model of ``first`` (hyper-parameters, tokenizer, tensors)."""
    for key in SAME_MODEL_HPARAMS:
        theirs, ours = first["hyper_parameters"].get(key), checkpoint["hyper_parameters"].get(key)
        if theirs != ours:
            raise CheckpointError(path, "foreign_architecture", f"its {key} differ from those of {str(first_path)!r} "
                                                                f"({_value_differences(ours, theirs, key)})")
    if checkpoint.get(TOKENIZER_KEY) != first.get(TOKENIZER_KEY):
        raise CheckpointError(path, "foreign_architecture", f"its tokenizer differs from that of {str(first_path)!r}")
    differences = state_differences(first["state_dict"], checkpoint["state_dict"], ("this one", "the first"))
    if differences:
        raise CheckpointError(path, "foreign_architecture", f"its tensors differ from those of {str(first_path)!r}: "
                                                            f"{differences}")


def _value_differences(here: Any, there: Any, name: str) -> str:
    """The first few (nested) keys under ``name`` whose values differ: ``name.key: here, there``."""
    if isinstance(here, dict) and isinstance(there, dict):
        parts = [_value_differences(here.get(k), there.get(k), f"{name}.{k}")
                 for k in sorted(set(here) | set(there), key=str) if here.get(k) != there.get(k)]
        return "; ".join(parts[:3]) + (" ..." if len(parts) > 3 else "")
    return f"{name}: {here!r} here, {there!r} there"


def top_k_checkpoints(run_dir: str | Path, k: int) -> list[tuple[Path, float]]:
    """The ``k`` best checkpoints of a run by the monitored validation metric.

    Reads the ModelCheckpoint records (``best_k_models``, ``best_model_score``) stored in
    ``<run_dir>/checkpoints/last.ckpt``. Paths are looked up by file name in
    ``<run_dir>/checkpoints`` so a moved run folder still works. Best first.
    """
    if k < 1:
        raise ValueError(f"k ({k}) must be >= 1.")
    ckpt_dir = Path(run_dir) / "checkpoints"
    last = read_checkpoint(ckpt_dir / "last.ckpt")
    records = [
        state for name, state in last.get("callbacks", {}).items()
        if name.startswith("ModelCheckpoint") and state.get("best_k_models")
    ]
    if not records:
        raise ValueError(f"{ckpt_dir / 'last.ckpt'} holds no ModelCheckpoint top-k records (no validation yet?).")
    state = records[0]
    # The record has no "mode": the callback's best score tells which end is best.
    scores = [float(v) for v in state["best_k_models"].values()]
    minimize = float(state["best_model_score"]) <= min(scores)
    scored = []
    for path, score in state["best_k_models"].items():
        local = ckpt_dir / Path(path).name
        if local.is_file():
            scored.append((local, float(score)))
    if not scored:
        raise ValueError(f"none of the recorded top-k checkpoints exist under {ckpt_dir}.")
    scored.sort(key=lambda item: item[1], reverse=not minimize)
    return scored[:k]


def write_averaged_checkpoint(paths: list[str | Path], out_path: str | Path) -> Path:
    """Average ``paths`` into a checkpoint that :func:`load_model` reads.

    The first checkpoint provides hyper-parameters and tokenizer; optimizer and loop
    state are dropped (an averaged model is for decoding, not for resuming).
    """
    base, state = _average(paths)
    keep = {k: base[k] for k in ("hyper_parameters", TOKENIZER_KEY, "pytorch-lightning_version") if k in base}
    averaged = {**keep, "state_dict": state, "averaged_from": [str(p) for p in paths]}
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(averaged, out_path)
    return out_path


def average_to_file(checkpoints: list[str | Path] | None = None, run_dir: str | Path | None = None, num: int = 5,
                    out: str | Path | None = None) -> Path:
    """Average ``checkpoints``, or else the ``num`` best of ``run_dir`` (listed with their scores), into
    ``out`` (default ``<run_dir>/checkpoints/avg<N>.ckpt``; needed with ``checkpoints``); returns the file.

    A ValueError (a :class:`CheckpointError` for an input that is not a usable checkpoint or not the
    first one's model) says what is wrong, and nothing is written.
    """
    if checkpoints:
        if out is None:
            raise ValueError("an output path is needed to average explicit checkpoints")
        paths = [Path(p) for p in checkpoints]
    elif run_dir is None:
        raise ValueError("give a run folder or the checkpoints to average")
    else:
        ranked = top_k_checkpoints(run_dir, num)
        for path, score in ranked:
            print(f"  {score:.4f}  {path}")
        paths = [p for p, _ in ranked]
    out = Path(out) if out is not None else Path(run_dir) / "checkpoints" / f"avg{len(paths)}.ckpt"
    write_averaged_checkpoint(paths, out)
    print(f"averaged {len(paths)} checkpoints -> {out}")
    return out
