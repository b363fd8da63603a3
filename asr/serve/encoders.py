"""The MultiStreamRecognizer's chunk encoders: eager ``stream_step`` (batched) or an exported ONNX step.

Axis legend: B streams in one step, S feature frames of one chunk, F feature bins,
C chunk (encoder frames), D model dim, T feature frames of a last partial chunk,
L blocks, H heads, M cached frames, Dh head dim.

Both keep one opaque state per stream and offer the same three calls, so the
:class:`~asr.serve.multi_stream.MultiStreamRecognizer` runs either without knowing which:

    init_state()                       -> a stream's state at time 0
    step(feats (B, S, F), states)      -> out (B, C, D), the B next states (inputs untouched)
    flush(feats (1, T, F), state)      -> out (1, T', D): the last partial chunk, end of stream
    time(state)                        -> encoder frames the stream has emitted

:class:`EagerChunkEncoder` stacks the B states into one batched ``stream_step``.
:class:`OnnxChunkEncoder` runs an exported step (batch 1, see :mod:`asr.serve.export`)
stream by stream; the last partial chunk, which the export does not cover, goes
through the eager ``stream_step(final=True)`` from the exported state turned back
into a :class:`~asr.streaming.state.StreamState` (the cached frames that are valid,
the conv cache, the time). CTC and rescoring stay eager in both.
"""

from __future__ import annotations

import numpy as np
import torch

from asr.serve.batching import split_state, stack_states
from asr.serve.export import OnnxEncoderStep
from asr.streaming.state import LayerCache, StreamState


class EagerChunkEncoder:
    """Whole chunks of many streams as one batched eager ``encoder.stream_step``."""

    def __init__(self, encoder, chunk_size: int, left_chunks: int) -> None:
        self.encoder = encoder
        self.chunk_size = chunk_size
        self.left_chunks = left_chunks

    def init_state(self) -> StreamState:
        return self.encoder.init_state(1, self.chunk_size, self.left_chunks)

    def time(self, state: StreamState) -> int:
        return state.time

    def step(self, feats: torch.Tensor, states: list[StreamState]) -> tuple[torch.Tensor, list[StreamState]]:
        batched = stack_states(states)  # new tensors: the streams' states stay as they were
        out, batched = self.encoder.stream_step(feats, batched)  # (B, C, D)
        # Each stream keeps its own feature overlap (its next chunk starts at `step`), so the state drops the
        # features and the lookahead frames left over: the next span brings them again.
        batched.feats = batched.pending = None
        return out, split_state(batched)

    def flush(self, feats: torch.Tensor, state: StreamState) -> torch.Tensor:
        out, _ = self.encoder.stream_step(feats, state, final=True)
        return out


class OnnxChunkEncoder:
    """Whole chunks through an exported ONNX step, one stream at a time (the export is batch 1).

    Args:
        runner: the loaded export; its chunk size, memory and feature sizes must be the recognizer's.
        encoder: the eager encoder of the same model, for the last partial chunk of each stream.
        chunk_size, left_chunks: the recognizer's streaming settings (checked against the export).
    """

    def __init__(self, runner: OnnxEncoderStep, encoder, chunk_size: int, left_chunks: int) -> None:
        spec = runner.spec
        want = dict(chunk_size=chunk_size, left_chunks=left_chunks, input_dim=encoder.input_dim,
                    d_model=encoder.d_model, num_layers=len(encoder.blocks),
                    chunk_span=encoder.chunk_window(chunk_size), pos_enc=encoder.scheme.name)
        differ = {k: (getattr(spec, k), v) for k, v in want.items() if getattr(spec, k) != v}
        if differ:
            listed = ", ".join(f"{k}: export {a} vs model {b}" for k, (a, b) in differ.items())
            raise ValueError(f"the ONNX step was exported with other settings than this recognizer ({listed}); "
                             f"export again with scripts/export.py or change the serving settings.")
        self.runner = runner
        self.encoder = encoder
        self.chunk_size = chunk_size
        self.left_chunks = left_chunks

    def init_state(self) -> list[np.ndarray]:
        return self.runner.initial_state()

    def time(self, state: list[np.ndarray]) -> int:
        return OnnxEncoderStep.state_time(state)

    def step(self, feats: torch.Tensor, states: list[list[np.ndarray]]) -> tuple[torch.Tensor, list]:
        outs, next_states = [], []
        for row, state in zip(feats.cpu().numpy(), states):
            out, state = self.runner.run(row[None], state)  # (1, C, D)
            outs.append(out)
            next_states.append(state)
        return torch.from_numpy(np.concatenate(outs)).to(feats.device), next_states

    def flush(self, feats: torch.Tensor, state: list[np.ndarray]) -> torch.Tensor:
        out, _ = self.encoder.stream_step(feats, self.to_stream_state(state, feats.device), final=True)
        return out

    def to_stream_state(self, state: list[np.ndarray], device: torch.device) -> StreamState:
        """The eager state equal to an exported one: each cache cut to its valid frames (left padding dropped)."""
        keys, values, conv, valid, time = (torch.from_numpy(np.asarray(t)).to(device) for t in state)
        valid, time = int(valid[0]), int(time[0])
        cached = keys.size(3)  # M
        layers = []
        for i in range(keys.size(0)):
            layer = LayerCache()
            if valid > 0:
                layer.key = keys[i][:, :, cached - valid :]  # (1, H, valid, Dh)
                layer.value = values[i][:, :, cached - valid :]
            if time > 0:  # before the first chunk the eager conv cache does not exist yet
                layer.conv = conv[i]  # (1, D, k - 1)
            layers.append(layer)
        return StreamState(batch_size=1, chunk_size=self.chunk_size, left_chunks=self.left_chunks,
                           layers=layers, time=time)
