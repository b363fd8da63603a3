"""An imported Wenet model deploys to sherpa-onnx in its online Wenet CTC format: the graph equals our
streaming decode on the same frames, sherpa-onnx computes exactly the frames we say it does, and
sherpa-onnx itself decodes the export as our streaming recognizer does (skipped without sherpa-onnx)."""

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from asr.data.features import SHERPA, FbankExtractor, FeatureConfig
from asr.interop.sherpa_export import export_checkpoint
from asr.interop.sherpa_onnx import SherpaCtcStep, SherpaExportError, SherpaRunner, export_sherpa_onnx
from asr.interop.sherpa_wenet import (INPUT_NAMES, SHERPA_WENET, WenetCtcStep, WenetRunner, check_wenet_exportable,
                                      export_wenet_ctc)
from asr.interop.wenet import import_wenet, write_checkpoint
from asr.train.checkpoint import load_model
from tests.interop import wenet_layout as wl

pytest.importorskip("onnxruntime", reason="pip install -e '.[export]'")
pytest.importorskip("onnxscript", reason="pip install -e '.[export]'")
torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[2]
C, LEFT = 4, 2
FRAMES = replace(SHERPA_WENET, num_mel_bins=wl.F_IN)  # what sherpa-onnx feeds the tiny model


def sherpa_installed() -> bool:
    try:
        import sherpa_onnx  # noqa: F401
    except ImportError:
        return False
    return True


def imported_ckpt(folder: Path, **options) -> Path:
    cfg = wl.config(**options)
    return write_checkpoint(import_wenet(wl.write_folder(folder / "wenet", cfg, wl.state_dict(cfg))),
                            folder / "imported.ckpt")


def noise(seconds: float, seed: int) -> torch.Tensor:
    return torch.randn(int(seconds * 16000), generator=torch.Generator().manual_seed(seed)) * 0.3


def varied(seconds: float, seed: int) -> np.ndarray:
    """Noise bursts, tones and silences of 80-300 ms at random levels: input that keeps changing, so the
    random model's best token keeps changing too and its outputs are long."""
    rng = np.random.default_rng(seed)
    pieces, total = [], int(seconds * 16000)
    while sum(map(len, pieces)) < total:
        n = int(rng.uniform(0.08, 0.3) * 16000)
        kind = rng.integers(3)
        if kind == 0:
            pieces.append(rng.standard_normal(n) * rng.uniform(0.01, 0.5))
        elif kind == 1:
            pieces.append(np.sin(2 * np.pi * rng.uniform(100, 4000) * np.arange(n) / 16000) * rng.uniform(0.05, 0.5))
        else:
            pieces.append(np.zeros(n))
    return np.concatenate(pieces)[:total].astype(np.float32)


def streamed_log_probs(model, feats: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        out, _ = model.encoder.stream_step(feats[None], model.encoder.init_state(1, C, LEFT), final=True)
        return model.ctc_log_probs(out)[0]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The tiny imported U2++ model (wenet_rel, causal) through export_checkpoint, as export.py runs it."""
    tmp = tmp_path_factory.mktemp("wenet")
    ckpt = imported_ckpt(tmp)
    export = export_checkpoint(ckpt, tmp / "sherpa", C, LEFT)
    return ckpt, export


def test_an_imported_model_goes_to_the_wenet_format_with_the_fbank_gap_said(exported):
    ckpt, export = exported
    assert export.model_type == "wenet_ctc" and len(export.warnings) == 1
    assert "snip_edges=False, high_freq=-400.0" in export.warnings[0] and "snip_edges=True" in export.warnings[0]
    assert "Measured: " in export.warnings[0] and "scripts/check_sherpa.py" in export.warnings[0]
    assert all(f"--wenet-ctc-chunk-size={C} --wenet-ctc-num-left-chunks={LEFT}" in c for c in export.commands)
    import onnx

    graph = onnx.load(str(export.model_path))
    assert [i.name for i in graph.graph.input] == list(INPUT_NAMES)  # sherpa-onnx feeds them in this order
    meta = {p.key: p.value for p in graph.metadata_props}
    assert meta["model_type"] == "wenet_ctc" and int(meta["vocab_size"]) == len(wl.UNITS)
    # sherpa-onnx's chunk length, (chunk - 1) * subsampling + right_context + 1, is our window
    assert (C - 1) * int(meta["subsampling_factor"]) + int(meta["right_context"]) + 1 == export.layout.window
    assert (int(meta["head"]), int(meta["num_blocks"]), int(meta["cnn_module_kernel"])) == (2, 2, 5)


@pytest.mark.parametrize("options", [{}, {"pos": "abs_pos", "norm": "layer_norm", "decoder": "transformer"}])
def test_the_graph_is_our_streaming_decode_on_the_same_frames(tmp_path, options):
    """Run as sherpa-onnx runs it (its offset from M, its mask), past several rolls of the cache;
    wenet_rel and abs_sin read the absolute stream time, so a wrong clock would show."""
    ckpt = imported_ckpt(tmp_path, **options)
    model, tok, _ = load_model(ckpt)
    export_wenet_ctc(WenetCtcStep(model, C, LEFT), tok, tmp_path / "out")
    feats = FbankExtractor(FRAMES)(noise(3.0, 1))
    got = torch.from_numpy(WenetRunner(tmp_path / "out" / "model.onnx").log_probs(feats.numpy()))
    assert got.size(0) > (LEFT + 3) * C
    assert (got - streamed_log_probs(model, feats)[: got.size(0)]).abs().max() < 1e-4


def test_a_wenet_rel_model_on_sherpa_frames_exports_exactly_to_the_nemo_format_too(tmp_path):
    """An imported model fine-tuned onto features=sherpa goes to the NeMo format: its keys' absolute times
    must follow the stream there as well."""
    model, tok, _ = load_model(imported_ckpt(tmp_path))
    export_sherpa_onnx(SherpaCtcStep(model, C, LEFT), tok, tmp_path / "nemo")
    feats = FbankExtractor(replace(SHERPA, num_mel_bins=wl.F_IN))(noise(3.0, 2))
    got = torch.from_numpy(SherpaRunner(tmp_path / "nemo" / "model.onnx").log_probs(feats.numpy()))
    assert (got - streamed_log_probs(model, feats)[: got.size(0)]).abs().max() < 1e-4


def test_what_the_wenet_format_cannot_carry_is_refused_by_name(tmp_path):
    model, _, cfg = load_model(imported_ckpt(tmp_path))
    features = FeatureConfig.from_dict(cfg.features)
    check_wenet_exportable(model, features, C, LEFT)
    with pytest.raises(SherpaExportError, match=r"window_type='hann' \(sherpa-onnx: 'povey'\)"):
        check_wenet_exportable(model, replace(features, window_type="hann"), C, LEFT)
    with pytest.raises(SherpaExportError, match=r"left_chunks \(0\)"):
        check_wenet_exportable(model, features, C, 0)
    model.encoder.chunk_lookahead = 2
    with pytest.raises(SherpaExportError, match="chunk_lookahead=2"):
        check_wenet_exportable(model, features, C, LEFT)
    model.encoder.chunk_lookahead = 0
    model.encoder.online_cmn_frames = 10.0
    with pytest.raises(SherpaExportError, match="online CMN"):
        check_wenet_exportable(model, features, C, LEFT)


def test_export_script_writes_the_wenet_format_and_warns(exported, tmp_path):
    ckpt, _ = exported
    res = subprocess.run([sys.executable, str(ROOT / "scripts/export.py"), "--checkpoint", str(ckpt), "--out-dir",
                          str(tmp_path), "--format", "sherpa-onnx", "--chunk-size", str(C), "--left-chunks", str(LEFT)],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert "sherpa-onnx Wenet CTC" in res.stdout and "warning: sherpa-onnx computes its fbank" in res.stdout
    assert "--wenet-ctc-model=" in res.stdout and (tmp_path / "tokens.txt").is_file()


FRAMES_PROBE = """
import json, sys
import numpy as np
import sherpa_onnx
folder, bins = sys.argv[1], int(sys.argv[2])
rec = sherpa_onnx.OnlineRecognizer.from_wenet_ctc(tokens=folder + "/tokens.txt", model=folder + "/model.onnx",
                                                  chunk_size=4, num_left_chunks=2, feature_dim=bins, num_threads=1)
stream = rec.create_stream()
wave = np.load(sys.argv[3])
stream.accept_waveform(16000, wave)
stream.input_finished()
print(json.dumps(list(stream.get_frames(0, 90))))
"""


@pytest.mark.skipif(not sherpa_installed(), reason="pip install sherpa-onnx==2.0.1 (the dev extra)")
def test_sherpa_onnx_computes_the_frames_we_say_it_does_for_a_wenet_model(exported, tmp_path):
    _, export = exported
    wave = noise(1.0, 3).numpy()
    np.save(tmp_path / "wave.npy", wave)
    res = subprocess.run([sys.executable, "-c", FRAMES_PROBE, str(export.model_path.parent), str(wl.F_IN),
                          str(tmp_path / "wave.npy")], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    theirs = np.array(json.loads(res.stdout.splitlines()[-1]), np.float32).reshape(90, wl.F_IN)
    ours = FbankExtractor(FRAMES)(torch.from_numpy(wave)).numpy()[:90]
    assert np.abs(theirs - ours).max() < 1e-3
    wenets = FbankExtractor(replace(FRAMES, snip_edges=True, high_freq=0.0))(torch.from_numpy(wave)).numpy()[:90]
    assert np.abs(theirs - wenets).max() > 0.1  # not the frames Wenet trains on


@pytest.mark.skipif(not sherpa_installed(), reason="pip install sherpa-onnx==2.0.1 (the dev extra)")
def test_sherpa_onnx_decodes_the_export_as_our_streaming_recognizer(exported):
    from asr.interop.sherpa_check import compare, export_layout, sherpa_frames_agreement

    ckpt, export = exported
    model, tok, cfg = load_model(ckpt)
    waves = [varied(seconds, 10 + i) for i, seconds in enumerate([0.7, 1.3, 2.2, 3.1, 1.8, 2.6])]
    keys = [f"n{i}" for i in range(len(waves))]
    # On sherpa-onnx's own frames: the very same ids, every utterance (the graph is exact).
    same_frames = compare(export.model_path.parent, model, tok, FRAMES, keys, waves)
    assert same_frames.identical == len(waves), same_frames.differing()
    lengths = [len(ids) for ids in same_frames.our_ids]
    assert sum(lengths) > 3 * len(waves), lengths  # the random model says things: the check means something
    # On the model's own frames (our decode as it runs everywhere else): what the fbank gap costs.
    own = compare(export.model_path.parent, model, tok, FeatureConfig.from_dict(cfg.features), keys, waves)
    agree = sherpa_frames_agreement(export_layout(export.model_path.parent), model, tok,
                                    FeatureConfig.from_dict(cfg.features), waves, own)
    assert agree == len(waves)
    print(f"\ntiny random imported model, {len(waves)} noise files: sherpa-onnx vs our streaming decode on the "
          f"model's frames identical {own.identical}/{len(waves)}; on sherpa-onnx's frames {agree}/{len(waves)}")


def test_the_exported_sinusoid_has_no_float64_trigonometry_and_the_same_values(exported):
    """sherpa-onnx's ONNX Runtime has no float64 Sin/Cos ('Could not find an implementation for Cos(7)')."""
    import onnx

    from asr.model.sinusoid import exported_table, sinusoid_table

    positions = torch.tensor([-64.0, 0.0, 1.0, 777.0, 12345.0, 99999.0], dtype=torch.float64)
    assert (exported_table(positions, 144) - sinusoid_table(positions, 144)).abs().max() < 1e-6
    graph = onnx.shape_inference.infer_shapes(onnx.load(str(exported[1].model_path))).graph
    types = {v.name: v.type.tensor_type.elem_type for v in [*graph.value_info, *graph.input, *graph.output]}
    trig = [n for n in graph.node if n.op_type in ("Sin", "Cos")]
    assert trig and all(types.get(n.input[0]) == onnx.TensorProto.FLOAT for n in trig)
