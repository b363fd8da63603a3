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

import pickle
import tempfile
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

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
    """``torch.load`` a Lightning checkpoint on CPU with a clear error for a bad path."""
    path = Path(ckpt_path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist.")
    # A checkpoint is untrusted input: weights_only=True unpickles tensors and plain containers only,
    # never code. Ours hold nothing else (state dicts, hyper-parameters as plain YAML values, callback
    # and loop state); a file that needs more is refused, not run.
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        raise ValueError(f"checkpoint {str(path)!r} holds objects other than tensors and plain values "
                         f"(refused: loading it could run code): {str(err).splitlines()[0]}") from None


def model_state_dict(checkpoint: dict) -> dict[str, torch.Tensor]:
    """The AsrModel's own state dict (LightningModule prefix ``model.`` removed)."""
    return {
        k[len(_MODEL_PREFIX):]: v for k, v in checkpoint["state_dict"].items() if k.startswith(_MODEL_PREFIX)
    }


def load_model(ckpt_path: str | Path) -> tuple[torch.nn.Module, Any, DictConfig]:
    """Rebuild the trained AsrModel (eval mode, CPU), its tokenizer and training config.

    Returns:
        (model, tokenizer, cfg) where cfg is the resolved training config, whose ``features``
        are the model's fbank options (``LEGACY`` when the checkpoint predates their record).
    """
    from asr.data.features import FeatureConfig
    from asr.model.asr_model import build_asr_model

    checkpoint = read_checkpoint(ckpt_path)
    hparams = checkpoint.get("hyper_parameters", {})
    if "model_kwargs" not in hparams:
        raise ValueError(
            f"checkpoint {str(ckpt_path)!r} has no hyper_parameters['model_kwargs']: "
            "it was not written by asr.train (keys: " + ", ".join(sorted(hparams)) + ")."
        )
    model = build_asr_model(**hparams["model_kwargs"])
    model.load_state_dict(model_state_dict(checkpoint))
    model.eval()
    if TOKENIZER_KEY in checkpoint:
        tokenizer = unpack_tokenizer(checkpoint[TOKENIZER_KEY])
    else:
        from asr.data.tokenizer import load_tokenizer

        tokenizer = load_tokenizer(hparams["tokenizer_path"])
    # Before the record, the frontends used the legacy options with one mel bin per input feature.
    features = FeatureConfig.from_dict(hparams.get("features", {"num_mel_bins": model.encoder.input_dim}))
    if features.num_mel_bins != model.encoder.input_dim:
        raise ValueError(f"checkpoint {str(ckpt_path)!r}: features.num_mel_bins ({features.num_mel_bins}) "
                         f"differs from the encoder's input_dim ({model.encoder.input_dim}).")
    cfg = OmegaConf.create(hparams.get("cfg", {}))
    cfg.features = features.to_dict()  # the record, not a config group the run may have lacked
    return model, tokenizer, cfg


def average_checkpoints(paths: list[str | Path]) -> dict[str, torch.Tensor]:
    """Element-wise mean of the ``state_dict`` of several checkpoints.

    Floating tensors are averaged in float64 and cast back; integer tensors (counters)
    are taken from the last checkpoint. Raises ValueError on mismatched keys or shapes.
    """
    if not paths:
        raise ValueError("average_checkpoints needs at least one checkpoint path.")
    total: dict[str, torch.Tensor] = {}
    last: dict[str, torch.Tensor] = {}
    for path in paths:
        state = read_checkpoint(path)["state_dict"]
        if total and set(state) != set(total):
            diff = sorted(set(state) ^ set(total))[:5]
            raise ValueError(f"checkpoint {str(path)!r} has different keys than {str(paths[0])!r}: {diff} ...")
        for key, value in state.items():
            if key in total and total[key].shape != value.shape:
                raise ValueError(
                    f"{key}: shape {tuple(value.shape)} in {str(path)!r} != {tuple(total[key].shape)}."
                )
            if value.is_floating_point():
                total[key] = total[key] + value.double() if key in total else value.double()
            else:
                total[key] = value
        last = state
    return {
        k: (total[k] / len(paths)).to(last[k].dtype) if last[k].is_floating_point() else last[k]
        for k in total
    }


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
    base = read_checkpoint(paths[0])
    keep = {k: base[k] for k in ("hyper_parameters", TOKENIZER_KEY, "pytorch-lightning_version") if k in base}
    averaged = {**keep, "state_dict": average_checkpoints(paths), "averaged_from": [str(p) for p in paths]}
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(averaged, out_path)
    return out_path
