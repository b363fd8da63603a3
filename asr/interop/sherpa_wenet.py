"""Export a streaming model in sherpa-onnx's online Wenet CTC format, the one it runs Wenet's own
released models with (``--wenet-ctc-model``): how an imported Wenet model deploys.

Axis legend: F feature bins, W feature frames of one chunk (window), C chunk (encoder frames),
M = left_chunks * C cached frames, L Conformer blocks, H heads, Dh head dim, D model dim,
K = kernel - 1, V vocab (blank included).

sherpa-onnx owns the state here (batch 1 only): it allocates the caches from the metadata and
its own ``chunk_size`` / ``num_left_chunks`` options (which must be the export's: the commands
printed by :func:`run_commands` pass them), feeds every output back, and counts ``offset``
itself, starting at M. The graph (``sherpa-onnx/csrc/online-wenet-ctc-model.cc``):

    x                    (1, W, F)          float  raw fbank of one chunk; W = (C - 1) rate + right_context + 1
    offset               (1,)               int64  M + encoder frames emitted so far
    required_cache_size  (1,)               int64  M
    attn_cache           (L, H, M, 2 Dh)    float  per block and head, keys | values of the last M frames
    conv_cache           (L, 1, D, K)       float  the causal conv modules' left context
    attn_mask            (1, 1, M + C)      bool   False on cache rows that hold no frame yet

outputs: log_probs (1, C, V), next_att_cache, next_conv_cache. Our stream clock is
``offset - required_cache_size``, so the positions (Wenet's ``rel_pos``, which scores each key's
absolute time, and ``abs_pos``) are those of our own streaming decode and of Wenet's runtime.
Global CMVN runs inside the graph; online CMN has no room in these tensors and is refused.

The frontend is sherpa-onnx's for Wenet models: kaldi-native-fbank with its
``FeatureExtractorConfig`` defaults on samples scaled to the int16 range (:data:`SHERPA_WENET`:
``snip_edges=False`` and the mel bank up to 7600 Hz). Wenet trains on ``snip_edges=True``
frames up to Nyquist, so sherpa-onnx feeds an imported model slightly other frames than it
learned, as it does Wenet's own models; :func:`feature_gap` names the options, and the export
says what that costs (:data:`MEASURED_GAP`) and how to measure it on one's own audio.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
from torch import nn

from asr.data.features import LEGACY, SHERPA, FeatureConfig
from asr.interop.sherpa_onnx import (METADATA_KEY, SherpaExportError, embed_positions, runner_session, stream_sizes,
                                     write_export)

INPUT_NAMES = ("x", "offset", "required_cache_size", "attn_cache", "conv_cache", "attn_mask")
OUTPUT_NAMES = ("log_probs", "next_att_cache", "next_conv_cache")
# sherpa-onnx's frames for an online Wenet CTC model: FeatureExtractorConfig's defaults (centred
# windows, mel bank up to Nyquist - 400 Hz) with normalize_samples=false (Wenet's int16 scale).
SHERPA_WENET = replace(LEGACY, snip_edges=False, high_freq=-400.0)
# The options sherpa-onnx may compute otherwise than the model learned and the export still goes
# ahead (warned, with their measured cost); any other difference is refused by name.
TOLERATED = ("snip_edges", "high_freq", "dither")
# What feeding a model SHERPA_WENET frames instead of its own costs, measured with scripts/check_sherpa.py
# on a Wenet-architecture model (wenet_rel, no online CMN) trained on Wenet's fbank: the quickstart's
# 4-layer Conformer, 1500 steps on the synth corpus, its 389 test utterances, chunk 16, 4 left chunks.
MEASURED_GAP = ("sherpa-onnx changed 283 of 389 greedy hypotheses of a small Wenet-fbank model (WER 74.73% -> "
                "75.22%: a weak model, so many changes; the graph itself is exact)")


@dataclass(frozen=True)
class WenetLayout:
    """Sizes of a Wenet CTC export (its state tensors and chunking), stored in the ONNX metadata."""

    chunk_size: int  # C
    left_chunks: int
    window: int  # W
    shift: int  # rate * C
    subsampling: int  # rate
    input_dim: int  # F
    d_model: int  # D
    num_layers: int  # L
    num_heads: int  # H
    conv_context: int  # K
    vocab_size: int  # V
    pos_enc: str

    @property
    def cache_frames(self) -> int:
        return self.left_chunks * self.chunk_size  # M

    def initial_state(self) -> list[np.ndarray]:
        """What sherpa-onnx makes for a new stream: zero caches, offset M."""
        dh = self.d_model // self.num_heads
        return [np.zeros((self.num_layers, self.num_heads, self.cache_frames, 2 * dh), np.float32),
                np.zeros((self.num_layers, 1, self.d_model, self.conv_context), np.float32),
                np.array([self.cache_frames], np.int64)]

    def mask(self, offset: int) -> np.ndarray:
        """sherpa-onnx's attn_mask (1, 1, M + C) for a chunk at ``offset``: False on the cache rows
        before the stream's start."""
        chunks_seen = offset // self.chunk_size - self.left_chunks
        off = max(self.cache_frames - chunks_seen * self.chunk_size, 0)
        mask = np.ones((1, 1, self.cache_frames + self.chunk_size), bool)
        mask[..., :off] = False
        return mask

    def metadata(self) -> dict[str, str]:
        """The keys sherpa-onnx's OnlineWenetCtcModel reads (a missing one ends its process), and ours."""
        meta = {
            "model_type": "wenet_ctc", "version": "1", "comment": "streaming", "model_author": "asr",
            "chunk_size": self.chunk_size, "left_chunks": self.left_chunks, "head": self.num_heads,
            "num_blocks": self.num_layers, "output_size": self.d_model, "cnn_module_kernel": self.conv_context + 1,
            "right_context": self.window - 1 - self.subsampling * (self.chunk_size - 1),
            "subsampling_factor": self.subsampling, "vocab_size": self.vocab_size,
        }
        meta = {k: str(v) for k, v in meta.items()}
        meta[METADATA_KEY] = json.dumps(asdict(self))
        return meta


def feature_gap(features: FeatureConfig) -> dict[str, tuple]:
    """``{option: (the model's value, sherpa-onnx's)}`` where sherpa-onnx's Wenet frontend differs
    (the number of bins is passed to it, so it never differs)."""
    return features.differences(replace(SHERPA_WENET, num_mel_bins=features.num_mel_bins))


def check_wenet_exportable(model, features: FeatureConfig, chunk_size: int, left_chunks: int) -> None:
    """Raise :class:`SherpaExportError` naming what sherpa-onnx's Wenet CTC format cannot carry."""
    refused = {k: v for k, v in feature_gap(features).items() if k not in TOLERATED}
    if refused:
        listed = ", ".join(f"{k}={ours!r} (sherpa-onnx: {theirs!r})" for k, (ours, theirs) in refused.items())
        raise SherpaExportError(f"sherpa-onnx computes other fbank frames than this model was trained on: {listed}. "
                                "Train (or fine-tune) with features=sherpa to deploy with sherpa-onnx.")
    if model.encoder.online_cmn_frames > 0:
        nemo = ", ".join(f"{k}={ours!r} (sherpa-onnx: {theirs!r})" for k, (ours, theirs) in
                         features.differences(replace(SHERPA, num_mel_bins=features.num_mel_bins)).items())
        raise SherpaExportError(
            f"sherpa-onnx computes other fbank frames than this model was trained on for its NeMo CTC format "
            f"({nemo}), and its Wenet CTC format (Kaldi fbank) has no state for this model's online CMN; train "
            "with features=sherpa to deploy with sherpa-onnx.")
    if model.encoder.chunk_lookahead > 0:
        raise SherpaExportError(
            f"the encoder has chunk_lookahead={model.encoder.chunk_lookahead}, and sherpa-onnx's Wenet CTC format "
            "emits every frame of the window it feeds; its NeMo CTC format (a window longer than its shift) carries "
            "the lookahead: train with features=sherpa and export that.")
    if chunk_size < 1 or left_chunks < 1:
        raise SherpaExportError(f"chunk_size ({chunk_size}) and left_chunks ({left_chunks}) must be >= 1: sherpa-onnx "
                                "steps whole chunks and keeps a state of fixed size.")


def gap_warnings(features: FeatureConfig, ckpt_path: str | Path, out_dir: str | Path) -> list[str]:
    """What the user must know when sherpa-onnx's Wenet frontend differs from the model's own frames."""
    gap = {k: v for k, v in feature_gap(features).items() if k != "dither"}
    if not gap:
        return []
    ours = ", ".join(f"{k}={a!r}" for k, (a, _) in gap.items())
    theirs = ", ".join(f"{k}={b!r}" for k, (_, b) in gap.items())
    return [f"sherpa-onnx computes its fbank for Wenet CTC models with {theirs}; this model learned {ours} "
            f"(as Wenet trains). Measured: {MEASURED_GAP}. Measure it on your own audio: python "
            f"scripts/check_sherpa.py --checkpoint {ckpt_path} --export-dir {out_dir} AUDIO (files, a folder, "
            "a data.list, ...)"]


class WenetCtcStep(nn.Module):
    """One whole chunk of one stream in sherpa-onnx's Wenet CTC format (the module docstring).

    Args:
        model: an ``AsrModel`` with a causal encoder (eval mode is set here).
        chunk_size: C >= 1.
        left_chunks: chunks of attention memory, >= 1.
    """

    def __init__(self, model, chunk_size: int, left_chunks: int) -> None:
        super().__init__()
        encoder = model.encoder
        encoder.init_state(1, chunk_size, left_chunks)  # chunk arguments and causality, with their messages
        if encoder.scheme.name == "abs_learned":
            raise SherpaExportError("abs_learned has a table of max_len positions, and a sherpa-onnx stream has no "
                                    "end: past the table its runtime would abort.")
        if encoder.online_cmn_frames > 0:
            raise SherpaExportError("online CMN has no state in sherpa-onnx's Wenet CTC format.")
        self.model = model.eval()
        self.encoder = encoder
        self.layout = WenetLayout(**stream_sizes(model, chunk_size, left_chunks))

    def example_inputs(self) -> tuple[torch.Tensor, ...]:
        """Zero features of a first chunk and a new stream's state (for tracing)."""
        lay = self.layout
        attn, conv, offset = (torch.from_numpy(t) for t in lay.initial_state())
        return (torch.zeros(1, lay.window, lay.input_dim), offset, torch.tensor([lay.cache_frames]), attn, conv,
                torch.from_numpy(lay.mask(lay.cache_frames)))

    def forward(self, x, offset, required_cache_size, attn_cache, conv_cache, attn_mask):
        """One chunk -> log_probs (1, C, V) and the next caches (module docstring)."""
        lay, encoder = self.layout, self.encoder
        C, Dh = lay.chunk_size, lay.d_model // lay.num_heads
        time = offset - required_cache_size  # (1,) our stream clock: encoder frames emitted
        h = encoder.subsampling((x - encoder.cmvn_mean) * encoder.cmvn_istd) * encoder.scale  # (1, C, D)
        h = embed_positions(h, time, lay.pos_enc)
        next_attn, next_conv = [], []
        for i, block in enumerate(encoder.blocks):
            cached = attn_cache[i][None]  # (1, H, M, 2 Dh)
            h, (k, v), c = block(h, mask=attn_mask, attn_cache=(cached[..., :Dh], cached[..., Dh:]),
                                 conv_cache=conv_cache[i], start_time=time)
            next_attn.append(torch.cat([k[0, :, C:], v[0, :, C:]], dim=-1))  # (H, M, 2 Dh): the last M frames
            next_conv.append(c)  # (1, D, K)
        log_probs = self.model.ctc_log_probs(encoder.norm(h))  # (1, C, V)
        return log_probs, torch.stack(next_attn), torch.stack(next_conv)


@torch.no_grad()
def export_wenet_ctc(step: WenetCtcStep, tokenizer, out_dir: str | Path) -> tuple[Path, Path]:
    """Write ``model.onnx`` (the metadata sherpa-onnx reads) and ``tokens.txt``."""
    return write_export(step, tokenizer, out_dir, INPUT_NAMES, OUTPUT_NAMES)


class WenetRunner:
    """Runs a Wenet CTC export as sherpa-onnx does, in ONNX Runtime (for checks without sherpa-onnx):
    chunks of W frames every rate * C frames, the offset and mask sherpa-onnx keeps."""

    def __init__(self, model_path: str | Path, threads: int = 1) -> None:
        self.session, meta = runner_session(model_path, threads)
        if meta.get("model_type") != "wenet_ctc" or METADATA_KEY not in meta:
            raise ValueError(f"{model_path} is not a Wenet CTC export of asr.interop.sherpa_wenet.")
        self.layout = WenetLayout(**json.loads(meta[METADATA_KEY]))

    def log_probs(self, feats: np.ndarray) -> np.ndarray:
        """feats (T, F) of one stream -> (chunks * C, V) log-probs of every chunk sherpa-onnx decodes
        (chunk i once more than W frames are ready: i S + W < T)."""
        lay = self.layout
        attn, conv, offset = lay.initial_state()
        outs, start = [], 0
        while start + lay.window < feats.shape[0]:
            chunk = feats[None, start : start + lay.window].astype(np.float32)  # (1, W, F)
            out, attn, conv = self.session.run(list(OUTPUT_NAMES), dict(zip(INPUT_NAMES, [
                chunk, offset, np.array([lay.cache_frames]), attn, conv, lay.mask(int(offset[0]))])))
            outs.append(out[0])
            offset = offset + out.shape[1]
            start += lay.shift
        return np.concatenate(outs) if outs else np.zeros((0, lay.vocab_size), np.float32)


def run_commands(out_dir: str | Path, layout: WenetLayout) -> list[str]:
    """How to run an export with sherpa-onnx: a WebSocket server and a file decoder (its chunking flags
    must be the export's)."""
    out = Path(out_dir)
    flags = (f"--wenet-ctc-model={out / 'model.onnx'} --wenet-ctc-chunk-size={layout.chunk_size} "
             f"--wenet-ctc-num-left-chunks={layout.left_chunks} --tokens={out / 'tokens.txt'} "
             f"--feat-dim={layout.input_dim}")
    return [f"sherpa-onnx-online-websocket-server --port=6006 {flags}", f"sherpa-onnx {flags} some.wav"]
