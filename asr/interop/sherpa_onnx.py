"""Export a streaming model for sherpa-onnx: its online NeMo CTC format (model.onnx + tokens.txt).

Axis legend: B streams, F feature bins, W feature frames of one chunk (window), S feature
frames between chunk starts (shift), C chunk (encoder frames), M = left_chunks * C cached
frames, L Conformer blocks, H heads, Dh head dim, D model dim, K = kernel - 1, V vocab.

Why NeMo CTC and not Wenet CTC. sherpa-onnx runs two online CTC formats. In Wenet's the
runtime owns the state: it feeds back an attention cache (L, H, M, 2 Dh), a conv cache
(L, 1, D, K) and an ``offset`` it counts itself, batch 1 only. Our models with online CMN
(the quickstart's) also carry the running sums of every feature frame so far; Wenet's
tensors have no room for them, so such a model could only be exported approximately. In
NeMo's format the model owns its state: three tensors whose sizes the model declares in its
metadata, fed back as they come out, stacked on a batch axis, so sherpa-onnx steps many
streams at once. They carry everything :class:`~asr.streaming.state.StreamState` and the
frontend hold, exactly:

    audio_signal            (B, F, W)  float  raw fbank of one chunk (sherpa transposes (B, W, F))
    length                  (B,)       int64  W (unused: every chunk is whole)
    cache_last_channel      (B, L, M, 2D)     per block, the keys | values of the last M frames,
                                              left-padded: the last min(time, M) rows are real
    cache_last_time         (B, 1, 1, L*D*K [+ F [+ 2 [+ 1]]])  the conv caches, flattened, then
                                              (with online CMN) the running sum of the frames that
                                              counted, (with its speech gate) their count and the
                                              gate's level, and (with its noise tracker) the floor's
                                              depth below its ceiling (all zero at the start, as
                                              sherpa-onnx makes it)
    cache_last_channel_len  (B,)       int64  the stream's time: encoder frames emitted

outputs: log_probs (B, C, V), log_probs_length (B,), then the three next states. Chunk i
is feature frames [i S, i S + W), as in ``encoder.stream_step`` and the ONNX encoder step
(:mod:`asr.serve.export`): S = rate * C, W = window + rate * (C + r - 1), r the encoder's
``chunk_lookahead`` (the window's last r encoder frames are seen, not emitted). The frontend is
sherpa-onnx's: kaldi-native-fbank with its default options and samples left in [-1, 1]
(``asr.data.features.SHERPA``; only the number of bins may differ, ``--feat-dim``), so only a
model trained with those features can be exported; global CMVN and online CMN run inside
the graph. sherpa-onnx reads ``vocab_size`` without the blank (NeMo's convention) and finds
the blank by name in tokens.txt (``<blk>``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
from torch import nn

from asr.data.features import FRAME_SHIFT_S, SHERPA, FeatureConfig
from asr.extras import require
from asr.model.normalization import CmnState
from asr.model.sinusoid import sinusoid_table

INPUT_NAMES = ("audio_signal", "length", "cache_last_channel", "cache_last_time", "cache_last_channel_len")
OUTPUT_NAMES = ("log_probs", "log_probs_length", "next_cache_last_channel", "next_cache_last_time",
                "next_cache_last_channel_len")
METADATA_KEY = "asr_sherpa_export"  # JSON of SherpaLayout (our own key; sherpa-onnx ignores it)
BLANK_SYMBOL = "<blk>"  # the first name sherpa-onnx looks the CTC blank up by
ONNX_OPSET = 18
SHERPA_SUBSAMPLING = 4  # sherpa-onnx's CTC timestamps and endpoint rules assume 4x subsampling


class SherpaExportError(ValueError):
    """This model or these settings cannot be decoded by sherpa-onnx as our recognizer decodes them."""


@dataclass(frozen=True)
class SherpaLayout:
    """Sizes of an export (its state tensors and chunking), stored in the ONNX metadata."""

    chunk_size: int  # C
    left_chunks: int
    window: int  # W
    shift: int  # S
    subsampling: int  # rate
    input_dim: int  # F
    d_model: int  # D
    num_layers: int  # L
    num_heads: int  # H
    conv_context: int  # K
    vocab_size: int  # V, blank included
    online_cmn_frames: float  # 0: off (no sums in the state)
    pos_enc: str
    online_cmn_gate_db: float = 0.0  # > 0: the state also holds the gate's count and level
    online_cmn_noise_snr_db: float = 0.0  # > 0: and the noise tracker's floor

    @property
    def cmn_size(self) -> int:
        """Floats of the online CMN's state: its sums (F), with a speech gate its count and level, and with
        the gate's noise tracker its floor."""
        if self.online_cmn_frames <= 0:
            return 0
        gate = 2 if self.online_cmn_gate_db > 0 else 0
        return self.input_dim + gate + (1 if gate and self.online_cmn_noise_snr_db > 0 else 0)

    @property
    def cache_frames(self) -> int:
        return self.left_chunks * self.chunk_size  # M

    @property
    def conv_size(self) -> int:
        return self.num_layers * self.d_model * self.conv_context

    @property
    def channel_dims(self) -> tuple[int, int, int]:
        return (self.num_layers, self.cache_frames, 2 * self.d_model)

    @property
    def time_dims(self) -> tuple[int, int, int]:
        return (1, 1, self.conv_size + self.cmn_size)

    def initial_state(self, batch_size: int = 1) -> list[np.ndarray]:
        """A new stream's state: zero caches, time 0 (what sherpa-onnx makes from the metadata)."""
        return [np.zeros((batch_size, *self.channel_dims), np.float32),
                np.zeros((batch_size, *self.time_dims), np.float32),
                np.zeros((batch_size,), np.int64)]

    def metadata(self) -> dict[str, str]:
        """The keys sherpa-onnx's OnlineNeMoCtcModel reads (a missing one ends its process), and ours."""
        meta = {
            "model_type": "nemo_ctc",
            "window_size": self.window,
            "chunk_shift": self.shift,
            "subsampling_factor": self.subsampling,
            "vocab_size": self.vocab_size - 1,  # NeMo counts the blank apart; sherpa-onnx adds it back
        }
        for i, dim in enumerate(self.channel_dims, 1):
            meta[f"cache_last_channel_dim{i}"] = dim
        for i, dim in enumerate(self.time_dims, 1):
            meta[f"cache_last_time_dim{i}"] = dim
        meta = {k: str(v) for k, v in meta.items()}
        meta[METADATA_KEY] = json.dumps(asdict(self))
        return meta


def sherpa_feature_problems(features: FeatureConfig) -> dict[str, tuple]:
    """``{option: (the model's value, sherpa-onnx's)}`` for every fbank option sherpa-onnx computes
    otherwise (the number of bins is passed to it, so it never differs)."""
    return features.differences(replace(SHERPA, num_mel_bins=features.num_mel_bins))


def check_exportable(model, features: FeatureConfig, chunk_size: int, left_chunks: int, tokenizer) -> None:
    """Raise :class:`SherpaExportError` naming what sherpa-onnx cannot run as we do in its NeMo CTC format."""
    check_streamable(model, chunk_size, left_chunks, tokenizer)
    problems = sherpa_feature_problems(features)
    if problems:
        listed = ", ".join(f"{k}={ours!r} (sherpa-onnx: {theirs!r})" for k, (ours, theirs) in problems.items())
        raise SherpaExportError(
            f"sherpa-onnx computes other fbank frames than this model was trained on: {listed}. Train with "
            "features=sherpa (conf/features/sherpa.yaml) to deploy with sherpa-onnx.")


def check_streamable(model, chunk_size: int, left_chunks: int, tokenizer) -> None:
    """Raise :class:`SherpaExportError` naming what no sherpa-onnx streaming format can run."""
    encoder = model.encoder
    if not encoder.causal:
        raise SherpaExportError("the encoder was built with causal=False: a non-causal model cannot stream, "
                                "and sherpa-onnx runs streaming models only; train with model.encoder.causal=true.")
    if chunk_size < 1:
        raise SherpaExportError(f"chunk_size ({chunk_size}) must be >= 1: sherpa-onnx steps whole chunks.")
    if left_chunks < 1:
        raise SherpaExportError(
            f"left_chunks ({left_chunks}) must be >= 1: sherpa-onnx keeps a state of fixed size (-1, unbounded "
            "memory, cannot be one; 0 leaves no attention cache).")
    if encoder.scheme.name == "abs_learned":
        raise SherpaExportError(
            "abs_learned has a table of max_len positions, and a sherpa-onnx stream has no end: past the table "
            "its runtime would abort. Export a relative scheme (rel_xl, shaw, rel_bias, rope) or abs_sin.")
    if encoder.blocks[0].conv.kernel < 2:
        raise SherpaExportError("conv_kernel must be >= 2 (the conv cache would be empty).")
    check_exportable_tokenizer(tokenizer)
    if int(tokenizer.vocab_size) != model.vocab_size:
        raise SherpaExportError(f"the tokenizer has {tokenizer.vocab_size} ids, the model {model.vocab_size}.")


def stream_sizes(model, chunk_size: int, left_chunks: int) -> dict:
    """The sizes every sherpa-onnx streaming export states: chunking (W frames in every S) and the
    tensors of the stream state (:class:`SherpaLayout`'s fields but online CMN)."""
    encoder = model.encoder
    sub = encoder.subsampling
    return dict(chunk_size=chunk_size, left_chunks=left_chunks, window=encoder.chunk_window(chunk_size),
                shift=sub.rate * chunk_size, subsampling=sub.rate, input_dim=encoder.input_dim,
                d_model=encoder.d_model, num_layers=len(encoder.blocks), num_heads=encoder.scheme.num_heads,
                conv_context=encoder.blocks[0].conv.kernel - 1, vocab_size=model.vocab_size,
                pos_enc=encoder.scheme.name)


def embed_positions(x: torch.Tensor, time: torch.Tensor, pos_enc: str) -> torch.Tensor:
    """The scheme's input term at each row's absolute times ``time[b] + [0, C)``. x: (B, C, D), time: (B,)."""
    if pos_enc != "abs_sin":
        return x  # the other schemes put their positions in the attention scores
    positions = time[:, None] + torch.arange(x.size(1), device=x.device)  # (B, C)
    table = sinusoid_table(positions.reshape(-1).double(), x.size(2))  # (B * C, D)
    return x + table.reshape(x.shape).to(x.dtype)


class SherpaCtcStep(nn.Module):
    """One whole chunk of B streams in sherpa-onnx's NeMo CTC format (the module docstring).

    Args:
        model: an ``AsrModel`` with a causal encoder (eval mode is set here).
        chunk_size: C >= 1.
        left_chunks: chunks of attention memory, >= 1.
    """

    def __init__(self, model, chunk_size: int, left_chunks: int) -> None:
        super().__init__()
        encoder = model.encoder
        encoder.init_state(1, chunk_size, left_chunks)  # chunk arguments and causality, with their messages
        self.model = model.eval()
        self.encoder = encoder
        self.layout = SherpaLayout(**stream_sizes(model, chunk_size, left_chunks),
                                   online_cmn_frames=encoder.online_cmn_frames,
                                   online_cmn_gate_db=encoder.online_cmn_gate_db,
                                   online_cmn_noise_snr_db=encoder.online_cmn_noise_snr_db)

    def example_inputs(self, batch_size: int = 2) -> tuple[torch.Tensor, ...]:
        """Zero features of a first chunk and the initial state of ``batch_size`` streams (for tracing)."""
        lay = self.layout
        feats = torch.zeros(batch_size, lay.input_dim, lay.window)
        length = torch.full((batch_size,), lay.window, dtype=torch.long)
        return (feats, length, *(torch.from_numpy(t) for t in lay.initial_state(batch_size)))

    def _online_cmn(self, feats: torch.Tensor, saved: torch.Tensor, time: torch.Tensor):
        """Running-mean normalization of feats (B, W, F) that follow the frames behind ``saved`` (B, F [+ 2 [+ 1]]);
        returns the frames and the saved state after the chunk's first S frames (what the next chunk follows).
        ``asr.model.normalization.OnlineCmn``'s own arithmetic, batched over streams of any age: the saved
        sums, then (with a speech gate) the count of frames that counted and the gate's level, then (with its
        noise tracker) the floor; without a gate every frame counts, so the count is the stream's frame time."""
        lay, norm = self.layout, self.encoder.online_cmn()
        F = lay.input_dim
        saved = saved.double()
        tracked = norm.gate is not None and norm.gate.noise_snr_db > 0
        if norm.gate is None:
            count, level = (time * lay.subsampling).double(), torch.zeros_like(saved[:, 0])
        else:
            count, level = saved[:, F], saved[:, F + 1]
        noise = saved[:, F + 2] if tracked else torch.zeros_like(saved[:, 0])
        x = feats.double()
        frame_mean, after = norm.running(x, CmnState(saved[:, :F], count, level, noise))  # (B, W, F), per frame
        out = (x - frame_mean + norm.global_mean).to(feats.dtype)
        last = lay.shift - 1
        kept = [after.sums[:, last]]
        if norm.gate is not None:
            kept += [after.count[:, last, None], after.level[:, last, None]]
        if tracked:
            kept += [after.noise[:, last, None]]
        return out, torch.cat(kept, dim=1).to(feats.dtype)

    def forward(self, audio_signal, length, cache_last_channel, cache_last_time, cache_last_channel_len):
        """One chunk of B streams -> log_probs (B, C, V), lengths (B,) and the next state (module docstring)."""
        lay, encoder = self.layout, self.encoder
        B, C, M, D, H = audio_signal.size(0), lay.chunk_size, lay.cache_frames, lay.d_model, lay.num_heads
        r = encoder.chunk_lookahead  # the window's last encoder frames: seen, not emitted, not cached
        Dh = D // H
        time = cache_last_channel_len  # (B,)
        feats = audio_signal.transpose(1, 2)  # (B, W, F)
        flat = cache_last_time[:, 0, 0]  # (B, L*D*K [+ F [+ 2 [+ 1]]])
        conv = flat[:, : lay.conv_size].reshape(B, lay.num_layers, D, lay.conv_context)
        if lay.online_cmn_frames > 0:
            feats, sums = self._online_cmn(feats, flat[:, lay.conv_size :], time)
        x = encoder.subsampling((feats - encoder.cmvn_mean) * encoder.cmvn_istd) * encoder.scale  # (B, C + r, D)
        x = embed_positions(x, time, lay.pos_enc)
        valid = torch.clamp(time, max=M)  # (B,) cached frames that are real
        mask = (torch.arange(M + C + r, device=x.device)[None] >= (M - valid)[:, None])[:, None]  # (B, 1, M + C + r)
        next_kv, next_conv = [], []
        for i, block in enumerate(encoder.blocks):
            cached = cache_last_channel[:, i]  # (B, M, 2D)
            keys = cached[..., :D].reshape(B, M, H, Dh).transpose(1, 2)  # (B, H, M, Dh)
            values = cached[..., D:].reshape(B, M, H, Dh).transpose(1, 2)
            # the clock: wenet_rel scores each key's absolute time
            x, (k, v), c = block(x, mask=mask, attn_cache=(keys, values), conv_cache=conv[:, i], start_time=time,
                                 lookahead=r)  # k, v: (B, H, M + C, Dh)
            k = k[:, :, C:].transpose(1, 2).reshape(B, M, D)  # the last M frames
            v = v[:, :, C:].transpose(1, 2).reshape(B, M, D)
            next_kv.append(torch.cat([k, v], dim=-1))  # (B, M, 2D)
            next_conv.append(c.reshape(B, -1))  # (B, D*K)
        log_probs = self.model.ctc_log_probs(encoder.norm(x[:, :C]))  # (B, C, V)
        parts = next_conv + ([sums] if lay.online_cmn_frames > 0 else [])
        return (
            log_probs,
            torch.full_like(time, C),
            torch.stack(next_kv, dim=1),  # (B, L, M, 2D)
            torch.cat(parts, dim=1)[:, None, None],  # (B, 1, 1, L*D*K [+ F [+ 2 [+ 1]]])
            time + C,
        )


@torch.no_grad()
def export_sherpa_onnx(step: SherpaCtcStep, tokenizer, out_dir: str | Path) -> tuple[Path, Path]:
    """Write ``model.onnx`` (batch axis dynamic, the metadata sherpa-onnx reads) and ``tokens.txt``."""
    batch = torch.export.Dim("batch", min=1, max=1024)
    return write_export(step, tokenizer, out_dir, INPUT_NAMES, OUTPUT_NAMES, {name: {0: batch} for name in INPUT_NAMES})


def write_export(step: nn.Module, tokenizer, out_dir: str | Path, input_names, output_names,
                 dynamic_shapes: dict | None = None) -> tuple[Path, Path]:
    """``step`` traced into ``out_dir/model.onnx`` with its layout's metadata, and ``tokens.txt``."""
    require("onnxscript", "export", "the sherpa-onnx export")  # what torch.onnx.export(dynamo=True) runs on
    onnx = require("onnx", "export", "the sherpa-onnx export")

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model_path = out_dir / "model.onnx"
    torch.onnx.export(
        step, step.example_inputs(), str(model_path), input_names=list(input_names),
        output_names=list(output_names), opset_version=ONNX_OPSET, dynamo=True, external_data=False,
        dynamic_shapes=dynamic_shapes,
    )
    graph = onnx.load(str(model_path))
    for key, value in step.layout.metadata().items():
        graph.metadata_props.add(key=key, value=value)
    onnx.save(graph, str(model_path))
    return model_path, write_tokens(tokenizer, out_dir / "tokens.txt")


def write_tokens(tokenizer, path: str | Path) -> Path:
    """``symbol id`` per line for every id; the blank is written ``<blk>`` (sherpa-onnx finds it by name)."""
    lines = []
    for i in range(int(tokenizer.vocab_size)):
        symbol = BLANK_SYMBOL if i == tokenizer.blank_id else tokenizer.id_to_piece(i)
        if not symbol or any(ch.isspace() for ch in symbol):
            raise SherpaExportError(f"token {i} ({symbol!r}) is empty or holds whitespace: tokens.txt cannot "
                                    "carry it.")
        lines.append(f"{symbol} {i}\n")
    path = Path(path)
    path.write_text("".join(lines), encoding="utf-8")
    return path


def runner_session(model_path: str | Path, threads: int = 1):
    """An ONNX Runtime CPU session on ``threads`` threads and the model's metadata (dict)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
    return session, session.get_modelmeta().custom_metadata_map


class SherpaRunner:
    """Runs an export the way sherpa-onnx's online CTC recognizer does, in ONNX Runtime (for checks
    without sherpa-onnx): whole chunks of W frames every S frames, greedy CTC across chunks."""

    def __init__(self, model_path: str | Path, threads: int = 1) -> None:
        self.session, meta = runner_session(model_path, threads)
        if METADATA_KEY not in meta:
            raise ValueError(f"{model_path} holds no {METADATA_KEY} metadata: not written by asr.interop.sherpa_onnx.")
        self.layout = SherpaLayout(**json.loads(meta[METADATA_KEY]))

    def log_probs(self, feats: np.ndarray) -> np.ndarray:
        """feats (T, F) of one stream -> (chunks * C, V) log-probs of every whole chunk sherpa-onnx decodes
        (it decodes chunk i once more than W frames are ready: i S + W < T)."""
        lay = self.layout
        state = lay.initial_state()
        outs = []
        start = 0
        while start + lay.window < feats.shape[0]:
            chunk = feats[None, start : start + lay.window].transpose(0, 2, 1).astype(np.float32)  # (1, F, W)
            out, _, *state = self.session.run(
                list(OUTPUT_NAMES), dict(zip(INPUT_NAMES, [chunk, np.array([lay.window]), *state])))
            outs.append(out[0])
            start += lay.shift
        return np.concatenate(outs) if outs else np.zeros((0, lay.vocab_size), np.float32)


def check_exportable_tokenizer(tokenizer) -> None:
    if tokenizer is None:
        raise SherpaExportError("no tokenizer: tokens.txt (the symbols sherpa-onnx prints) needs the model's "
                                "tokenizer; the checkpoint holds none and its tokenizer_path is gone.")


def tail_seconds(layout) -> float:
    """Zeros after an utterance that let sherpa-onnx decode its last real frames (a window and a shift, + 0.1 s):
    it decodes a chunk only once more than its window of frames is there and drops the last partial chunk."""
    return (layout.window + layout.shift) * FRAME_SHIFT_S + 0.1


def run_commands(out_dir: str | Path, layout: SherpaLayout) -> list[str]:
    """How to run an export with sherpa-onnx: a WebSocket server and a file decoder."""
    out = Path(out_dir)
    model, tokens = out / "model.onnx", out / "tokens.txt"
    return [
        f"sherpa-onnx-online-websocket-server --port=6006 --nemo-ctc-model={model} --tokens={tokens} "
        f"--feat-dim={layout.input_dim} --model-type=nemo_ctc",
        # sherpa-onnx's command line pads each file with zeros: its default right padding (0.8 s) is
        # shorter than the window and shift a chunk of this export needs after the last word.
        f"sherpa-onnx --nemo-ctc-model={model} --tokens={tokens} --feat-dim={layout.input_dim} "
        f"--left-padding=0 --right-padding={tail_seconds(layout):.2f} some.wav",
    ]
