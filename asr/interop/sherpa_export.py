"""Export a checkpoint for sherpa-onnx in the format its fbank allows: the one entry point over both
formats (:mod:`asr.interop.sherpa_onnx`'s NeMo CTC, :mod:`asr.interop.sherpa_wenet`'s Wenet CTC).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from asr.data.features import FeatureConfig
from asr.interop import sherpa_onnx, sherpa_wenet
from asr.train.checkpoint import load_model


@dataclass
class SherpaExport:
    """What :func:`export_checkpoint` wrote: sherpa-onnx's ``model_type`` (``nemo_ctc`` or ``wenet_ctc``),
    the files, the layout (``SherpaLayout`` / ``WenetLayout``), the sherpa-onnx commands that run them,
    and what the user must know (``warnings``)."""

    model_type: str
    model_path: Path
    tokens_path: Path
    layout: object
    commands: list[str]
    warnings: list[str]


def export_checkpoint(ckpt_path: str | Path, out_dir: str | Path, chunk_size: int, left_chunks: int) -> SherpaExport:
    """Load a checkpoint, check that sherpa-onnx can run it, write model.onnx + tokens.txt.

    The format follows the model's fbank: sherpa-onnx's NeMo CTC format when the model was trained
    on the frames sherpa-onnx computes for it (``features=sherpa``: exact), else its Wenet CTC format,
    whose Kaldi fbank is Wenet's up to the options ``asr.interop.sherpa_wenet`` tolerates and warns
    about (an imported Wenet model, or one trained with Wenet's features). Raises
    :class:`~asr.interop.sherpa_onnx.SherpaExportError` (what sherpa-onnx cannot run, named), or the
    checkpoint's own loading errors (``asr.train.checkpoint_file.CheckpointError``: one without a
    tokenizer among them).
    """
    model, tokenizer, cfg = load_model(ckpt_path)
    features = FeatureConfig.from_dict(cfg.features)
    if sherpa_onnx.sherpa_feature_problems(features):
        sherpa_onnx.check_streamable(model, chunk_size, left_chunks, tokenizer)
        sherpa_wenet.check_wenet_exportable(model, features, chunk_size, left_chunks)
        step = sherpa_wenet.WenetCtcStep(model, chunk_size, left_chunks)
        paths = sherpa_wenet.export_wenet_ctc(step, tokenizer, out_dir)
        return SherpaExport("wenet_ctc", *paths, step.layout, sherpa_wenet.run_commands(out_dir, step.layout),
                            sherpa_wenet.gap_warnings(features, ckpt_path, out_dir))
    sherpa_onnx.check_exportable(model, features, chunk_size, left_chunks, tokenizer)
    step = sherpa_onnx.SherpaCtcStep(model, chunk_size, left_chunks)
    paths = sherpa_onnx.export_sherpa_onnx(step, tokenizer, out_dir)
    return SherpaExport("nemo_ctc", *paths, step.layout, sherpa_onnx.run_commands(out_dir, step.layout), [])
