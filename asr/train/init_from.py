"""Fine-tuning: start a training run from another checkpoint's weights (``init_from=CKPT``).

The source is any checkpoint ``asr.train.checkpoint.load_model`` reads: a training checkpoint
of this toolkit, an averaged one, or an imported Wenet model (``scripts/import_wenet.py``).
It is read as untrusted input (``weights_only=True``), and checked like every checkpoint an entry point takes.

What is built (``finetune.keep_architecture``):

- true (default): the source's architecture (its ``encoder_kwargs`` and decoder sizes), so
  every tensor matches; only the vocabulary comes from this run's tokenizer, and the dropout
  rates and loss weights (``ctc_weight``, ``reverse_weight``, ``lsm_weight``) from this run's
  ``model`` config, except where the source has a right-to-left decoder: then its loss weights
  come with it (a run's own ``reverse_weight`` of 0 would leave that decoder untrained);
- false: this run's ``model`` / ``pos_enc`` config; tensors are loaded where name and shape
  match the source, the rest keeps its fresh initialization.

The model's input comes with it too (:func:`adopt_from_source`): the run computes the source's
fbank frames (``features``) and normalizes them with the source's global CMVN, so an imported
Wenet model is fine-tuned on the frames it learned (snip_edges, Kaldi mel banks ...) whatever
the experiment's ``features`` group says. What the command line sets wins: ``features=<preset>``
or ``features.<option>=...``, ``data.cmvn_file=...``, ``model.<loss weight>=...``; every choice is
printed (:meth:`Adoption.lines`).

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


# The loss weights a source with a right-to-left decoder brings along.
LOSS_WEIGHTS = ("ctc_weight", "reverse_weight", "lsm_weight")


@dataclass
class Adoption:
    """What a fine-tuning run takes from its source rather than from its own config.

    ``features``: the fbank options the run computes; ``source_cmvn``: keep the source's global
    CMVN (else the run's ``data.cmvn_file``); ``loss_weights``: ``build_asr_model`` kwargs taken
    from the source; ``notes``: one line per choice, for the run's log."""

    features: Any
    source_cmvn: bool
    loss_weights: dict[str, float]
    notes: list[str]

    def lines(self) -> list[str]:
        return [f"init_from: {note}" for note in self.notes]


def overridden_keys(overrides: list[str] | tuple[str, ...]) -> set[str]:
    """The config keys a list of Hydra command-line overrides sets (``features``, ``features.dither``,
    ``model.reverse_weight``, ...; ``+``/``++``/``~`` prefixes dropped)."""
    return {o.lstrip("+~").split("=", 1)[0].strip() for o in overrides}


def source_features(source: Source) -> Any:
    """The source's fbank options (``LEGACY`` with its input_dim bins when it predates their record)."""
    from asr.data.features import LEGACY, FeatureConfig

    if source.features is None:
        return FeatureConfig.from_dict({**LEGACY.to_dict(),
                                        "num_mel_bins": source.model_kwargs["encoder_kwargs"]["input_dim"]})
    return FeatureConfig.from_dict(source.features)


def adopt_from_source(source: Source, run_features: Any, overrides: list[str] | tuple[str, ...],
                      keep_architecture: bool = True) -> Adoption:
    """The features, CMVN and loss weights a run started from ``source`` uses (module docstring).

    Args:
        source: the checkpoint read by :func:`read_source`.
        run_features: the run's ``features`` group (``asr.data.features.FeatureConfig``).
        overrides: the command line's Hydra overrides (what the user set, over the experiment's choices).
        keep_architecture: the run builds the source's model (its decoders, so its loss weights apply).
    """
    from asr.data.features import FeatureConfig

    keys = overridden_keys(overrides)
    theirs = source_features(source)
    notes = []
    if "features" in keys:
        features = run_features
        differ = ", ".join(f"{k}: source {a!r} vs run {b!r}" for k, (a, b) in theirs.differences(features).items()
                           if k != "dither")
        notes.append("features: the command line's features group" + (
            f"; the source was trained on other frames ({differ})" if differ else " (the source's frames)"))
    else:
        mine = {k.split(".", 1)[1] for k in keys if k.startswith("features.")}
        features = FeatureConfig.from_dict({**theirs.to_dict(), **{k: getattr(run_features, k) for k in mine}})
        kept = ", ".join(f"{k}={v!r}" for k, v in theirs.to_dict().items() if k not in mine)
        notes.append(f"features: the source's ({kept})" + (
            f"; from the command line: {', '.join(f'{k}={getattr(features, k)!r}' for k in sorted(mine))}"
            if mine else ""))
    source_cmvn = "data.cmvn_file" not in keys
    if source_cmvn:
        notes.append("CMVN: the source's global CMVN (data.cmvn_file is not read)")
    else:
        notes.append("CMVN: data.cmvn_file from the command line, not the source's")
    loss_weights = {}
    if keep_architecture and source.model_kwargs.get("r2l_decoder_layers", 0) > 0:
        loss_weights = {k: float(source.model_kwargs[k]) for k in LOSS_WEIGHTS
                        if k in source.model_kwargs and f"model.{k}" not in keys}
        if loss_weights:
            notes.append("loss weights: the source's, it has a right-to-left decoder ("
                         + ", ".join(f"{k} {v}" for k, v in loss_weights.items()) + ")")
    return Adoption(features, source_cmvn, loss_weights, notes)


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
