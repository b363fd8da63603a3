"""Export the streaming encoder step with explicit state tensors: TorchScript and ONNX.

Axis legend: L Conformer blocks, H heads, M = left_chunks * C cached frames,
Dh head dim, D model dim, C chunk size (encoder frames), S feature frames of one
chunk (``window + rate * (C - 1)``), F feature bins, k conv kernel.

The eager :class:`~asr.streaming.state.StreamState` grows its caches over the
first chunks and keeps Python ints; an exported graph needs a fixed tuple of
tensors. :class:`EncoderStep` keeps every cache at its full size M, left-padded,
with ``valid`` saying how many of the last M frames are real (the padding is
masked out, as :mod:`asr.serve.batching` does for streams of different ages),
and the absolute ``time`` as a tensor. One call encodes one whole chunk of
batch 1:

    inputs:  feats (1, S, F) raw fbank, keys (L, 1, H, M, Dh), values (L, 1, H, M, Dh),
             conv (L, 1, D, k-1), valid (1,) int64, time (1,) int64
    outputs: out (1, C, D), then the same five state tensors for the next chunk

Chunk i's features are frames ``[i * rate * C, i * rate * C + S)`` (chunks overlap
by ``S - rate * C`` frames), exactly what ``stream_step`` encodes chunk by chunk.
The last partial chunk of an utterance is not covered: it needs ``final=True``
of the eager step.

``abs_learned`` has no bound check inside the graph; :class:`OnnxEncoderStep`
raises ``TooLongForTable`` before running a chunk past the table.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from asr.extras import require
from asr.model.positions import TooLongForTable
from asr.model.sinusoid import sinusoid_table

STATE_NAMES = ("keys", "values", "conv", "valid", "time")
INPUT_NAMES = ("feats", *STATE_NAMES)
OUTPUT_NAMES = ("out", *(f"next_{name}" for name in STATE_NAMES))
METADATA_KEY = "asr_encoder_step"  # JSON of StepSpec in the ONNX metadata / TorchScript extra files
ONNX_OPSET = 18  # the dynamo exporter's own opset (no version conversion)


class ExportError(ValueError):
    """This encoder or these streaming settings cannot be exported as a fixed-state step."""


@dataclass(frozen=True)
class StepSpec:
    """Sizes of one exported step (stored beside the graph so a runner needs no model code)."""

    chunk_size: int  # C
    left_chunks: int
    chunk_span: int  # S
    chunk_step: int  # rate * C feature frames between chunk starts
    input_dim: int  # F
    d_model: int  # D
    num_layers: int  # L
    num_heads: int  # H
    head_dim: int  # Dh
    conv_context: int  # k - 1
    pos_enc: str
    max_len: int | None  # abs_learned table size

    @property
    def cache_frames(self) -> int:
        return self.left_chunks * self.chunk_size  # M

    def initial_state(self) -> tuple[torch.Tensor, ...]:
        """Zero caches, nothing valid, time 0 (float32 / int64)."""
        kv = (self.num_layers, 1, self.num_heads, self.cache_frames, self.head_dim)
        return (
            torch.zeros(kv),
            torch.zeros(kv),
            torch.zeros(self.num_layers, 1, self.d_model, self.conv_context),
            torch.zeros(1, dtype=torch.long),
            torch.zeros(1, dtype=torch.long),
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> StepSpec:
        return cls(**json.loads(text))


class EncoderStep(nn.Module):
    """One whole chunk through ``encoder`` with the state as explicit tensors (see the module docstring).

    Args:
        encoder: a causal ``ConformerEncoder`` (eval mode is set here).
        chunk_size: C > 0.
        left_chunks: chunks of attention memory, >= 1 (a fixed-size state needs a bound).
    """

    def __init__(self, encoder, chunk_size: int, left_chunks: int) -> None:
        super().__init__()
        encoder.init_state(1, chunk_size, left_chunks)  # causality and chunk arguments, with their messages
        if left_chunks < 1:
            raise ExportError(
                f"left_chunks ({left_chunks}) must be >= 1: the exported state has a fixed size "
                "(-1, unbounded memory, cannot be a fixed tensor; 0 has no cache to carry)."
            )
        conv_kernel = encoder.blocks[0].conv.kernel
        if conv_kernel < 2:
            raise ExportError(f"conv_kernel ({conv_kernel}) must be >= 2: the conv cache would be empty.")
        scheme = encoder.scheme
        if not (scheme.is_relative or scheme.name in ("none", "abs_sin", "abs_learned", "wenet_rel")):
            raise ExportError(f"position scheme {scheme.name!r} has no exported step.")
        self.encoder = encoder.eval()
        sub = encoder.subsampling
        self.spec = StepSpec(
            chunk_size=chunk_size, left_chunks=left_chunks, chunk_span=encoder.chunk_window(chunk_size),
            chunk_step=sub.rate * chunk_size, input_dim=encoder.input_dim, d_model=encoder.d_model,
            num_layers=len(encoder.blocks), num_heads=scheme.num_heads, head_dim=encoder.d_model // scheme.num_heads,
            conv_context=conv_kernel - 1, pos_enc=scheme.name, max_len=getattr(scheme, "max_len", None),
        )

    def example_inputs(self) -> tuple[torch.Tensor, ...]:
        """A first chunk of zero features and the initial state (for tracing)."""
        return (torch.zeros(1, self.spec.chunk_span, self.spec.input_dim), *self.spec.initial_state())

    def _embed_positions(self, x: torch.Tensor, time: torch.Tensor) -> torch.Tensor:
        """The scheme's input term at absolute times ``time + [0, C + r)``, with ``time`` a tensor. x: (1, C + r, D)."""
        name = self.spec.pos_enc
        if name not in ("abs_sin", "abs_learned"):
            return x  # relative schemes put their positions in the attention scores
        positions = time + torch.arange(x.size(1), device=x.device)  # (C + r,) int64
        if name == "abs_sin":
            return x + sinusoid_table(positions.double(), self.spec.d_model).to(x.dtype)[None]
        return x + self.encoder.scheme.table.weight.index_select(0, positions)[None]

    def forward(self, feats, keys, values, conv, valid, time):
        """feats (1, S, F) and the state -> out (1, C, D) and the next state (shapes in the module docstring)."""
        encoder, spec = self.encoder, self.spec
        C, M = spec.chunk_size, spec.cache_frames
        r = encoder.chunk_lookahead  # the span's last encoder frames: seen, not emitted, not cached
        x = encoder.subsampling((feats - encoder.cmvn_mean) * encoder.cmvn_istd) * encoder.scale  # (1, C + r, D)
        x = self._embed_positions(x, time)
        # Keys are M cached frames then the chunk's C and its r; the first M - valid cached ones are padding.
        mask = (torch.arange(M + C + r, device=x.device) >= (M - valid))[None, None, :]  # (1, 1, M + C + r)
        next_keys, next_values, next_conv = [], [], []
        for i, block in enumerate(encoder.blocks):
            # time (1,): the chunk's first frame; wenet_rel reads its keys' absolute times from it.
            x, (k, v), c = block(x, mask, None, (keys[i], values[i]), conv[i], time, r)  # k, v: (1, H, M + C, Dh)
            next_keys.append(k[:, :, C:])
            next_values.append(v[:, :, C:])
            next_conv.append(c)
        return (
            encoder.norm(x[:, :C]),
            torch.stack(next_keys),
            torch.stack(next_values),
            torch.stack(next_conv),
            torch.clamp(valid + C, max=M),
            time + C,
        )


def whole_chunks(feats: torch.Tensor, spec: StepSpec) -> list[torch.Tensor]:
    """The (1, S, F) feature windows of every whole chunk of feats (1, T, F), in order."""
    if feats.dim() != 3 or feats.size(0) != 1 or feats.size(2) != spec.input_dim:
        raise ValueError(f"feats must be (1, T, {spec.input_dim}); got {tuple(feats.shape)}.")
    starts = range(0, feats.size(1) - spec.chunk_span + 1, spec.chunk_step)
    return [feats[:, s : s + spec.chunk_span] for s in starts]


@torch.no_grad()
def export_torchscript(step: EncoderStep, path: str | Path) -> Path:
    """Trace ``step`` and save it with its :class:`StepSpec` as an extra file."""
    # The model's attention runs custom autograd Functions, which a trace cannot save;
    # torch.export lowers them to aten ops first, and that graph traces cleanly.
    lowered = torch.export.export(step, step.example_inputs()).module()
    traced = torch.jit.trace(lowered, step.example_inputs(), check_trace=False)
    path = Path(path)
    torch.jit.save(traced, str(path), _extra_files={METADATA_KEY: step.spec.to_json()})
    return path


def load_torchscript(path: str | Path) -> tuple[torch.jit.ScriptModule, StepSpec]:
    extra = {METADATA_KEY: ""}
    module = torch.jit.load(str(path), _extra_files=extra)
    if not extra[METADATA_KEY]:
        raise ValueError(f"{path} holds no {METADATA_KEY} spec: it was not written by asr.serve.export.")
    return module, StepSpec.from_json(extra[METADATA_KEY])


@torch.no_grad()
def export_onnx(step: EncoderStep, path: str | Path) -> Path:
    """Write ``step`` as ONNX (the torch.export-based exporter, fixed shapes) with its spec in the metadata.

    The dynamo exporter is the one that lowers the attention's custom autograd
    Functions to plain ops; the TorchScript-based one stops at them.
    """
    require("onnxscript", "export", "ONNX export")  # what torch.onnx.export(dynamo=True) runs on
    onnx = require("onnx", "export", "ONNX export")

    path = Path(path)
    torch.onnx.export(
        step, step.example_inputs(), str(path), input_names=list(INPUT_NAMES), output_names=list(OUTPUT_NAMES),
        opset_version=ONNX_OPSET, dynamo=True, external_data=False,
    )
    model = onnx.load(str(path))
    model.metadata_props.add(key=METADATA_KEY, value=step.spec.to_json())
    onnx.save(model, str(path))
    return path


def quantize_int8(onnx_path: str | Path, out_path: str | Path) -> Path:
    """Dynamic int8 quantization of the weights (onnxruntime), activations stay float."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(onnx_path), str(out_path), weight_type=QuantType.QInt8)
    return Path(out_path)


class OnnxEncoderStep:
    """Runs an exported step in ONNX Runtime and carries its state between chunks.

    Args:
        path: a file written by :func:`export_onnx` (or its int8 version).
        threads: intra-op threads of the session.
    """

    def __init__(self, path: str | Path, threads: int = 1) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        meta = self.session.get_modelmeta().custom_metadata_map
        if METADATA_KEY not in meta:
            raise ValueError(f"{path} holds no {METADATA_KEY} metadata: it was not written by asr.serve.export.")
        self.spec = StepSpec.from_json(meta[METADATA_KEY])
        self.reset()

    def initial_state(self) -> list[np.ndarray]:
        """A new stream's state (the five state tensors of the module docstring, as numpy)."""
        return [t.numpy() for t in self.spec.initial_state()]

    def reset(self) -> None:
        """Start a new stream (the state :meth:`step` carries)."""
        self.state = self.initial_state()

    @staticmethod
    def state_time(state: list[np.ndarray]) -> int:
        """Encoder frames a stream with this state has emitted (its last state tensor)."""
        return int(state[-1][0])

    @property
    def time(self) -> int:
        return self.state_time(self.state)

    def step(self, feats: np.ndarray) -> np.ndarray:
        """feats (1, S, F) float32 of the next whole chunk -> out (1, C, D), carrying the state here."""
        out, self.state = self.run(feats, self.state)
        return out

    def run(self, feats: np.ndarray, state: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
        """feats (1, S, F) and a stream's state -> out (1, C, D) and its next state (``state`` is not changed).

        The stateless form, for a server that keeps one state per stream over one session.
        """
        spec = self.spec
        if feats.shape != (1, spec.chunk_span, spec.input_dim):
            raise ValueError(f"feats must be (1, {spec.chunk_span}, {spec.input_dim}); got {feats.shape}.")
        time = self.state_time(state)
        if spec.max_len is not None and time + spec.chunk_size > spec.max_len:
            raise TooLongForTable(
                f"abs_learned has max_len={spec.max_len} positions but the next chunk ends at time "
                f"{time + spec.chunk_size - 1}; raise pos_enc.max_len or use a relative scheme."
            )
        out, *next_state = self.session.run(
            list(OUTPUT_NAMES), dict(zip(INPUT_NAMES, [feats.astype(np.float32), *state]))
        )
        return out, next_state
