"""Fine-tuning: start a training run from another checkpoint's weights (``init_from=CKPT``).

The source is any checkpoint ``asr.train.checkpoint.load_model`` reads: a training checkpoint
of this toolkit, an averaged one, or an imported Wenet model (``scripts/import_wenet.py``).
It is read as untrusted input (``weights_only=True``), and checked like every checkpoint an entry point takes.

What is built (``finetune.keep_architecture``):

- true (default): the source's architecture (its ``encoder_kwargs`` and decoder sizes), so
  every tensor matches; only the vocabulary comes from this run's tokenizer, and the dropout
  rates and loss weights (``ctc_weight``, ``reverse_weight``, ``lsm_weight``) from this run's
  ``model`` config;
- false: this run's ``model`` / ``pos_enc`` config; tensors are loaded where name and shape
  match the source, the rest keeps its fresh initialization.

Then :func:`load_source_weights` copies every matching tensor and reports every one it did not
(with why). Another tokenizer re-initializes only the output layers (CTC projection, decoder
embedding and output, for each decoder) and keeps, bit for bit, the rows of the pieces both
vocabularies share (matched by piece string: ``<blank>``, ``<unk>``, ``<sos/eos>`` and every
common piece). The source's global CMVN comes with it (a buffer like any other): the encoder
keeps the input normalization it learned with.

``finetune.freeze_encoder_steps`` and ``finetune.encoder_lr`` act in the LightningModule
(``asr.train.module``): the encoder's gradients are dropped for the first N optimizer steps
(AdamW then skips it: no update, no weight decay, no moment), and the encoder's parameters
form their own optimizer group with their own peak learning rate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from asr.train.checkpoint import model_state_dict, read_model_checkpoint

# Parameters with one row per vocabulary entry (V, ...): re-mapped row by row on a new tokenizer.
VOCAB_TENSORS = ("ctc_proj.weight", "ctc_proj.bias", "embed.weight", "output.weight", "output.bias")
# Training knobs a fine-tuning run sets itself even when it keeps the source's architecture.
RUN_MODEL_KEYS = ("ctc_weight", "reverse_weight", "lsm_weight", "decoder_dropout")


@dataclass
class Source:
    """The source checkpoint: its model kwargs, weights (AsrModel names) and tokenizer."""

    path: Path
    model_kwargs: dict[str, Any]
    state_dict: dict[str, torch.Tensor]
    tokenizer: Any
    features: dict[str, Any] | None = None  # hyper_parameters["features"]; None: written before they were recorded


@dataclass
class InitReport:
    """What :func:`load_source_weights` did, tensor by tensor."""

    loaded: list[str] = field(default_factory=list)
    rows_kept: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (rows kept, rows in all)
    reinitialized: dict[str, str] = field(default_factory=dict)  # name -> why
    unused: list[str] = field(default_factory=list)  # source tensors with no counterpart here

    def lines(self) -> list[str]:
        out = [f"init_from: {len(self.loaded)} tensors loaded as they are"]
        out += [f"  {name}: {kept} of {total} rows kept (pieces both vocabularies share), {total - kept} "
                "re-initialized (pieces the source did not have)" for name, (kept, total) in self.rows_kept.items()]
        out += [f"  {name}: re-initialized ({why})" for name, why in self.reinitialized.items()]
        if self.unused:
            out.append(f"  not used from the source (no such tensor here): {', '.join(self.unused)}")
        return out


def read_source(path: str | Path) -> Source:
    """Read a checkpoint for ``init_from`` as untrusted input (``asr.train.checkpoint.read_model_checkpoint``):
    a file that is not a usable model of this toolkit is a one-line ``CheckpointError`` naming why."""
    checkpoint, tokenizer, _ = read_model_checkpoint(path)
    hparams = checkpoint["hyper_parameters"]
    return Source(Path(path), dict(hparams["model_kwargs"]), model_state_dict(checkpoint), tokenizer,
                  hparams.get("features"))


def check_source_features(source: Source, features: Any) -> None:
    """The run must compute the frames the source model was trained on (``asr.data.features``).

    Dither is left out of the comparison: it is noise added while training, not a property
    of the frames the model expects (Wenet trains with it and decodes without).
    """
    from asr.data.features import LEGACY, FeatureConfig

    if source.features is None:
        theirs = FeatureConfig.from_dict({**LEGACY.to_dict(),
                                          "num_mel_bins": source.model_kwargs["encoder_kwargs"]["input_dim"]})
    else:
        theirs = FeatureConfig.from_dict(source.features)
    differ = {k: v for k, v in theirs.differences(features).items() if k != "dither"}
    if differ:
        listed = ", ".join(f"{k}: source {a!r} vs run {b!r}" for k, (a, b) in differ.items())
        raise ValueError(f"init_from: {source.path} was trained on other fbank frames than this run's features "
                         f"({listed}); set features.<option> to match.")


def finetune_model_kwargs(source: Source, run_kwargs: dict[str, Any]) -> dict[str, Any]:
    """The source's architecture with this run's vocabulary, dropout rates and loss weights."""
    kwargs = {**source.model_kwargs, "encoder_kwargs": dict(source.model_kwargs["encoder_kwargs"])}
    for key in ("vocab_size", "sos_eos_id", "blank_id", *RUN_MODEL_KEYS):
        if key in run_kwargs:
            kwargs[key] = run_kwargs[key]
    kwargs["encoder_kwargs"]["dropout"] = run_kwargs["encoder_kwargs"].get("dropout", 0.0)
    return kwargs


def pieces(tokenizer: Any) -> list[str]:
    """Every id's piece (``<blank>``, ``<unk>``, ..., ``<sos/eos>``)."""
    return [tokenizer.id_to_piece(i) for i in range(tokenizer.vocab_size)]


def _is_vocab_tensor(name: str) -> bool:
    return name.startswith("ctc_proj.") or any(
        name == f"{dec}.{leaf}" for dec in ("decoder", "r2l_decoder") for leaf in VOCAB_TENSORS[2:]
    )


@torch.no_grad()
def load_source_weights(model: torch.nn.Module, source: Source, tokenizer: Any) -> InitReport:
    """Copy the source's tensors into ``model`` (freshly initialized); see the module docstring."""
    report = InitReport()
    old, new = pieces(source.tokenizer), pieces(tokenizer)
    same_vocab = old == new
    old_index = {p: i for i, p in enumerate(old)}
    shared = [(i, old_index[p]) for i, p in enumerate(new) if p in old_index]  # (new id, old id)
    state = model.state_dict()
    for name, target in state.items():
        if name not in source.state_dict:
            report.reinitialized[name] = "not in the source"
            continue
        value = source.state_dict[name]
        if _is_vocab_tensor(name) and not same_vocab:
            if value.shape[1:] != target.shape[1:]:
                report.reinitialized[name] = f"shape {tuple(value.shape)} in the source, {tuple(target.shape)} here"
                continue
            rows_new = torch.tensor([n for n, _ in shared], dtype=torch.long)
            rows_old = torch.tensor([o for _, o in shared], dtype=torch.long)
            target[rows_new] = value[rows_old].to(target.dtype)
            report.rows_kept[name] = (len(shared), target.size(0))
            continue
        if value.shape != target.shape:
            report.reinitialized[name] = f"shape {tuple(value.shape)} in the source, {tuple(target.shape)} here"
            continue
        target.copy_(value)
        report.loaded.append(name)
    report.unused = sorted(set(source.state_dict) - set(state))
    return report
