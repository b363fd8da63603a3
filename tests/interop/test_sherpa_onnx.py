"""The sherpa-onnx export (NeMo CTC format): the graph equals our streaming recognizer, batched streams
of any age equal each alone, bad exports are refused by name, and sherpa-onnx itself decodes the
export of a small trained model as our streaming recognizer does (every test utterance)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir

from asr.data.audio import cut_waveform
from asr.data.cmvn import compute_cmvn, save_cmvn
from asr.data.features import LEGACY, SHERPA, FbankExtractor, FeatureConfig, training_backend
from asr.data.manifest import read_cuts
from asr.data.tokenizer import load_tokenizer, write_char_units
from asr.decode import ctc_greedy
from asr.interop.sherpa_check import compare, normalize, sherpa_tokens, tail_seconds, with_tail
from asr.interop.sherpa_server import server_binary
from asr.interop.sherpa_onnx import (
    INPUT_NAMES, OUTPUT_NAMES, SherpaCtcStep, SherpaExportError, SherpaRunner, check_exportable,
    export_sherpa_onnx, sherpa_feature_problems,
)
from asr.model import normalization
from asr.model.asr_model import build_asr_model
from asr.train.checkpoint import load_model
from asr.train.run import train
from tests.serve.helpers import noise
from tests.train.tiny_corpus import CONF, make_tiny_corpus, tiny_overrides

pytest.importorskip("onnxruntime", reason="pip install -e '.[export]'")
pytest.importorskip("onnxscript", reason="pip install -e '.[export]'")
torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[2]
C, LEFT = 4, 2


def sherpa_installed() -> bool:
    try:
        import sherpa_onnx  # noqa: F401
    except ImportError:
        return False
    return True


def random_model(pos_enc="rel_xl", online_cmn_frames=10.0, seed=0, online_cmn_gate_db=0.0, **scheme):
    tok = load_tokenizer(write_char_units(["abc de fgh"], Path(f"/tmp/asr_test_tok_{seed}")))
    torch.manual_seed(seed)
    model = build_asr_model(
        vocab_size=tok.vocab_size, sos_eos_id=tok.sos_eos_id, blank_id=tok.blank_id,
        encoder_kwargs=dict(pos_enc=pos_enc, input_dim=80, d_model=32, num_heads=2, num_layers=2, ffn_dim=64,
                            conv_kernel=3, causal=True, online_cmn_frames=online_cmn_frames,
                            online_cmn_gate_db=online_cmn_gate_db, **scheme),
        decoder_layers=1, decoder_heads=2, decoder_ffn_dim=64).eval()
    feats = FbankExtractor(SHERPA)(noise(3.0, 1, 16000))
    model.encoder.set_cmvn(feats.mean(0), feats.std(0))
    return model, tok


def eager_log_probs(model, wave: torch.Tensor) -> torch.Tensor:
    """Our streaming path: the model's frontend frames, online CMN, stream_step, CTC: (T', V)."""
    feats = FbankExtractor(SHERPA)(wave)[None]
    norm = model.encoder.online_cmn()
    feats = norm(feats) if norm is not None else feats
    with torch.no_grad():
        out, _ = model.encoder.stream_step(feats, model.encoder.init_state(1, C, LEFT), final=True)
        return model.ctc_log_probs(out)[0]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A random rel_xl model with online CMN, exported once for the tests below."""
    model, tok = random_model()
    out = tmp_path_factory.mktemp("sherpa")
    export_sherpa_onnx(SherpaCtcStep(model, C, LEFT), tok, out)
    return model, tok, out


def test_graph_equals_eager_streaming_with_online_cmn(exported):
    model, _, out = exported
    wave = noise(2.5, 4, 16000)
    runner = SherpaRunner(out / "model.onnx")
    got = torch.from_numpy(runner.log_probs(FbankExtractor(SHERPA)(wave).numpy()))
    want = eager_log_probs(model, wave)[: got.size(0)]
    assert got.size(0) > (LEFT + 2) * C  # the attention cache filled and rolled for several chunks
    assert (got - want).abs().max() < 1e-4


def test_streams_of_different_ages_in_one_batch_equal_each_alone(exported):
    """sherpa-onnx stacks ready streams on the batch axis, whatever their age."""
    _, _, out = exported
    runner = SherpaRunner(out / "model.onnx")
    lay, session = runner.layout, runner.session
    feats = [FbankExtractor(SHERPA)(noise(2.0, s, 16000)).numpy() for s in (5, 6)]

    def step(chunks, states):
        return session.run(list(OUTPUT_NAMES), dict(zip(INPUT_NAMES, [
            np.stack(chunks), np.full(len(chunks), lay.window), *[np.concatenate(s) for s in zip(*states)]])))

    def chunk(f, i):
        return f[i * lay.shift : i * lay.shift + lay.window].T  # (F, W)

    alone = [lay.initial_state(), lay.initial_state()]
    old = alone[0]
    for i in range(3):  # stream 0 is three chunks older
        _, _, *old = step([chunk(feats[0], i)], [old])
    young = lay.initial_state()
    lp_b, _, *next_b = step([chunk(feats[0], 3), chunk(feats[1], 0)], [old, young])
    lp_0, _, *next_0 = step([chunk(feats[0], 3)], [old])
    lp_1, _, *next_1 = step([chunk(feats[1], 0)], [young])
    assert np.abs(lp_b - np.concatenate([lp_0, lp_1])).max() < 1e-5
    for b, a0, a1 in zip(next_b, next_0, next_1):
        assert np.abs(b.astype(np.float64) - np.concatenate([a0, a1])).max() < 1e-5


@pytest.fixture(scope="module")
def exported_lookahead(tmp_path_factory):
    """A random rel_xl model with online CMN whose chunks see 3 frames past their end, exported once."""
    model, tok = random_model(seed=3, chunk_lookahead=3)
    out = tmp_path_factory.mktemp("sherpa_lookahead")
    export_sherpa_onnx(SherpaCtcStep(model, C, LEFT), tok, out)
    return model, tok, out


def test_a_lookahead_graph_equals_eager_streaming(exported_lookahead):
    """The window is the chunk and its lookahead (longer than the shift by them); only the chunk is emitted."""
    model, _, out = exported_lookahead
    runner = SherpaRunner(out / "model.onnx")
    assert runner.layout.window - runner.layout.shift == 3 + 3 * 4  # subsampling window 7 - rate 4, and r * rate
    wave = noise(2.5, 8, 16000)
    got = torch.from_numpy(runner.log_probs(FbankExtractor(SHERPA)(wave).numpy()))
    want = eager_log_probs(model, wave)[: got.size(0)]
    assert got.size(0) > (LEFT + 2) * C
    assert (got - want).abs().max() < 1e-4


@pytest.mark.skipif(not sherpa_installed(), reason="pip install sherpa-onnx==2.0.1 (the dev extra)")
def test_sherpa_onnx_decodes_a_lookahead_export_as_our_streams(exported_lookahead):
    """sherpa-onnx itself feeds windows longer than their shift as the graph expects. Compared over the frames
    sherpa-onnx decodes: our recognizer also decodes the tail's last partial chunk, and a random model reads
    tokens into zeros."""
    model, _, out = exported_lookahead
    runner = SherpaRunner(out / "model.onnx")
    waves = with_tail(runner.layout, [noise(seconds, seed + 20, 16000).numpy() for seed, seconds in
                                      enumerate([0.9, 1.7, 2.6])], lead_s=0.5)
    theirs = sherpa_tokens(out, waves)
    for wave, ids in zip(waves, theirs):
        frames = runner.log_probs(FbankExtractor(SHERPA)(torch.from_numpy(wave)).numpy()).shape[0]
        log_probs = eager_log_probs(model, torch.from_numpy(wave))[:frames]
        ours = ctc_greedy(log_probs[None], torch.tensor([frames]))[0]
        assert list(ours) == list(ids)
    assert sum(len(ids) for ids in theirs) > 12  # the model said a lot: the comparison meant something


@pytest.mark.parametrize("noise_snr_db", [0.0, 6.0])
def test_graph_equals_eager_streaming_with_a_speech_gated_online_cmn(tmp_path, noise_snr_db):
    """The gate's count and level ride in the state after the conv caches and the sums, then the noise
    tracker's floor."""
    model, tok = random_model(online_cmn_gate_db=20.0, seed=3, online_cmn_noise_snr_db=noise_snr_db)
    export_sherpa_onnx(SherpaCtcStep(model, C, LEFT), tok, tmp_path)
    runner = SherpaRunner(tmp_path / "model.onnx")
    assert runner.layout.time_dims[2] == runner.layout.conv_size + 80 + 2 + (noise_snr_db > 0)
    wave = noise(3.0, 7, 16000)
    wave[:8000] *= 1e-3  # half a second 60 dB down, then speech-level noise, then a quiet pause
    wave[24000:36000] *= 1e-3
    feats = FbankExtractor(SHERPA)(wave)
    norm = model.encoder.online_cmn()
    _, state = norm.apply(feats[:200])
    assert 0 < float(state.count) < 200  # the gate left the quiet frames out: the test exercises it
    if noise_snr_db > 0:  # and the tracker's floor moved off its ceiling
        assert 0 < float(state.noise) < 2 * normalization.NOISE_CEILING
    got = torch.from_numpy(runner.log_probs(feats.numpy()))
    want = eager_log_probs(model, wave)[: got.size(0)]
    assert (got - want).abs().max() < 1e-4


def test_metadata_has_every_key_sherpa_onnx_reads(exported):
    import onnx

    model, tok, out = exported
    meta = {p.key: p.value for p in onnx.load(str(out / "model.onnx")).metadata_props}
    required = ["window_size", "chunk_shift", "subsampling_factor", "vocab_size"] + [
        f"cache_last_{kind}_dim{i}" for kind in ("channel", "time") for i in (1, 2, 3)]
    assert all(meta.get(k, "").isdigit() for k in required)
    assert int(meta["vocab_size"]) == model.vocab_size - 1  # NeMo counts the blank apart
    assert (int(meta["window_size"]), int(meta["chunk_shift"])) == (7 + 4 * (C - 1), 4 * C)
    tokens = (out / "tokens.txt").read_text(encoding="utf-8").splitlines()
    assert tokens[0] == "<blk> 0" and len(tokens) == tok.vocab_size
    assert all(len(line.split()) == 2 for line in tokens)


@pytest.mark.slow
@pytest.mark.parametrize("pos_enc,scheme", [("abs_sin", {}), ("shaw", {"max_distance": 4}),
                                            ("rel_bias", {"max_distance": 4}), ("rope", {}), ("none", {})])
def test_every_streaming_scheme_exports_exactly(tmp_path, pos_enc, scheme):
    model, tok = random_model(pos_enc, **scheme)
    export_sherpa_onnx(SherpaCtcStep(model, C, LEFT), tok, tmp_path)
    wave = noise(2.5, 4, 16000)
    got = torch.from_numpy(SherpaRunner(tmp_path / "model.onnx").log_probs(FbankExtractor(SHERPA)(wave).numpy()))
    assert (got - eager_log_probs(model, wave)[: got.size(0)]).abs().max() < 1e-4


def test_what_sherpa_onnx_cannot_run_is_refused_by_name():
    model, tok = random_model()
    with pytest.raises(SherpaExportError, match=r"snip_edges=True \(sherpa-onnx: False\)"):
        check_exportable(model, LEGACY, C, LEFT, tok)
    with pytest.raises(SherpaExportError, match="no tokenizer"):
        check_exportable(model, SHERPA, C, LEFT, None)
    with pytest.raises(SherpaExportError, match=r"chunk_size \(0\)"):
        check_exportable(model, SHERPA, 0, LEFT, tok)
    with pytest.raises(SherpaExportError, match=r"left_chunks \(-1\)"):
        check_exportable(model, SHERPA, C, -1, tok)
    non_causal = build_asr_model(
        vocab_size=tok.vocab_size, sos_eos_id=tok.sos_eos_id, blank_id=tok.blank_id,
        encoder_kwargs=dict(input_dim=80, d_model=32, num_heads=2, num_layers=1, ffn_dim=64, conv_kernel=3,
                            causal=False), decoder_layers=1, decoder_heads=2, decoder_ffn_dim=64)
    with pytest.raises(SherpaExportError, match="non-causal"):
        check_exportable(non_causal, SHERPA, C, LEFT, tok)
    learned, _ = random_model("abs_learned", max_len=100)
    with pytest.raises(SherpaExportError, match="abs_learned"):
        check_exportable(learned, SHERPA, C, LEFT, tok)
    assert sherpa_feature_problems(FeatureConfig(**{**SHERPA.to_dict(), "num_mel_bins": 40})) == {}


# ---- a small trained model, end to end: train -> checkpoint -> export script -> sherpa-onnx ----------


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny model trained with sherpa-onnx's features on the tiny corpus (a few epochs)."""
    corpus = make_tiny_corpus(tmp_path_factory.mktemp("corpus"), n_train=16)
    stats = compute_cmvn(read_cuts(corpus / "cuts_train.jsonl.gz"), FbankExtractor(SHERPA, training_backend(SHERPA)),
                         num_workers=0)
    save_cmvn(stats, corpus / "cmvn_sherpa.json")
    out = tmp_path_factory.mktemp("run")
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=[
            *tiny_overrides(corpus, out), "features=sherpa", "data.cmvn_file=cmvn_sherpa.json",
            "model.encoder.online_cmn_frames=20", "+trainer.enable_progress_bar=false"])
    train(cfg)
    return corpus, out / "checkpoints" / "last.ckpt"


def export_script(*args):
    return subprocess.run([sys.executable, str(ROOT / "scripts/export.py"), *args], capture_output=True, text=True,
                          timeout=600, cwd=ROOT)


def test_export_script_refuses_legacy_features_and_a_missing_tokenizer(trained, tmp_path):
    corpus, ckpt = trained
    ckpt_data = torch.load(ckpt, weights_only=False)
    legacy = dict(ckpt_data, hyper_parameters={**ckpt_data["hyper_parameters"], "features": LEGACY.to_dict()})
    torch.save(legacy, tmp_path / "legacy.ckpt")
    res = export_script("--checkpoint", str(tmp_path / "legacy.ckpt"), "--out-dir", str(tmp_path / "a"),
                        "--format", "sherpa-onnx", "--chunk-size", str(C))
    assert res.returncode == 2 and "cannot export for sherpa-onnx: sherpa-onnx computes other fbank" in res.stderr
    assert "snip_edges=True" in res.stderr and "features=sherpa" in res.stderr
    no_tok = {k: v for k, v in ckpt_data.items() if k != "asr_tokenizer_files"}
    no_tok["hyper_parameters"] = {**ckpt_data["hyper_parameters"], "tokenizer_path": str(tmp_path / "gone")}
    torch.save(no_tok, tmp_path / "notok.ckpt")
    res = export_script("--checkpoint", str(tmp_path / "notok.ckpt"), "--out-dir", str(tmp_path / "b"),
                        "--format", "sherpa-onnx")
    assert res.returncode == 2 and "no tokenizer" in res.stderr
    res = export_script("--checkpoint", str(ckpt), "--out-dir", str(tmp_path / "c"), "--format", "sherpa-onnx",
                        "--left-chunks", "0")
    assert res.returncode == 2 and "left_chunks (0) must be >= 1" in res.stderr


@pytest.fixture(scope="module")
def trained_export(trained, tmp_path_factory):
    corpus, ckpt = trained
    out = tmp_path_factory.mktemp("export")
    res = export_script("--checkpoint", str(ckpt), "--out-dir", str(out), "--format", "sherpa-onnx",
                        "--chunk-size", str(C), "--left-chunks", str(LEFT))
    assert res.returncode == 0, res.stderr
    assert "sherpa-onnx-online-websocket-server" in res.stdout and "online CMN on" in res.stdout
    return corpus, ckpt, out


@pytest.mark.skipif(not sherpa_installed(), reason="pip install sherpa-onnx==2.0.1 (the dev extra)")
def test_sherpa_onnx_decodes_every_test_utterance_as_our_streaming_recognizer(trained_export):
    """The small trained model, every test (and dev) utterance. Trained on noise for two epochs it
    mostly says nothing; the random model below says a lot (and its near-tied scores make it the
    stricter check)."""
    corpus, ckpt, out = trained_export
    model, tok, cfg = load_model(ckpt)
    cuts = list(read_cuts(corpus / "cuts_test.jsonl.gz")) + list(read_cuts(corpus / "cuts_dev.jsonl.gz"))
    waves = [cut_waveform(c).numpy() for c in cuts]
    result = compare(out, model, tok, FeatureConfig.from_dict(cfg.features), [c.id for c in cuts], waves)
    assert result.identical == len(cuts), result.differing()


@pytest.mark.skipif(not sherpa_installed(), reason="pip install sherpa-onnx==2.0.1 (the dev extra)")
def test_sherpa_onnx_gives_our_text_where_the_model_says_a_lot(exported):
    model, tok, out = exported
    waves = [noise(seconds, seed, 16000).numpy() for seed, seconds in enumerate([0.7, 1.3, 2.2, 3.1])]
    result = compare(out, model, tok, SHERPA, [f"n{i}" for i in range(len(waves))], waves)
    assert result.identical == len(waves), result.differing()
    assert min(len(ids) for ids in result.our_ids) > 10  # long outputs: the comparison meant something


@pytest.mark.skipif(not sherpa_installed(), reason="pip install sherpa-onnx==2.0.1 (the dev extra)")
def test_a_model_sherpa_onnx_rejects_is_a_clear_error_not_a_dead_process(tmp_path, exported):
    from asr.interop.sherpa_check import sherpa_tokens

    _, _, out = exported
    shutil.copy(out / "tokens.txt", tmp_path / "tokens.txt")
    (tmp_path / "model.onnx").write_bytes(b"not an onnx model")
    with pytest.raises(RuntimeError, match="sherpa-onnx failed"):
        sherpa_tokens(tmp_path, [np.zeros(16000, np.float32)])


@pytest.mark.skipif(shutil.which("sherpa-onnx") is None, reason="pip install sherpa-onnx (its command line)")
def test_the_printed_file_command_runs_as_printed_and_reads_the_last_word(exported, tmp_path):
    """export.py prints this command; sherpa-onnx's defaults (0.8 s of right padding) would cut the last chunk."""
    import shlex

    import soundfile as sf

    from asr.interop.sherpa_check import our_greedy_tokens, read_tokens, symbols_to_ids
    from asr.interop.sherpa_onnx import run_commands

    model, tok, out = exported
    layout = SherpaRunner(out / "model.onnx").layout
    wave = noise(2.0, 11, 16000).numpy()
    sf.write(tmp_path / "some.wav", wave, 16000, subtype="PCM_16")
    command = shlex.split(run_commands(out, layout)[1])
    assert "--left-padding=0" in command and any(a.startswith("--right-padding=") for a in command)
    proc = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    printed = json.loads(next(line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("{")))
    got = symbols_to_ids(printed["tokens"], read_tokens(out / "tokens.txt"))
    pcm = sf.read(tmp_path / "some.wav", dtype="float32")[0]
    padded = np.concatenate([pcm, np.zeros(int(tail_seconds(layout) * 16000), np.float32)])
    assert got == our_greedy_tokens(model, tok, SHERPA, C, LEFT, [padded])[0]


def test_normalize_compares_as_wer_scoring_does():
    assert normalize(" Abc<unk> de  ") == "abc de" and normalize("g<unk>f") == "gf"


@pytest.mark.skipif(not sherpa_installed() or server_binary() is None,
                    reason="pip install sherpa-onnx-bin==2.0.1 (the dev extra) for sherpa-onnx's WebSocket server")
def test_sherpa_onnx_websocket_server_serving_our_export_answers_a_loopback_client(exported):
    import asyncio

    from asr.interop.sherpa_check import our_greedy_tokens, read_tokens, symbols_to_ids
    from asr.interop.sherpa_server import free_port, server_command, start_server, stream_to_sherpa

    model, tok, out = exported
    layout = SherpaRunner(out / "model.onnx").layout
    tail = tail_seconds(layout)
    wave = noise(1.8, 9, 16000).numpy()
    port = free_port()
    server = start_server(server_command(out, port, tail, layout.input_dim), port)
    try:
        session = asyncio.run(asyncio.wait_for(
            stream_to_sherpa(f"ws://127.0.0.1:{port}", wave, 16000, piece_s=0.2, realtime=False), 120))
    finally:
        server.terminate()
        server.wait(timeout=30)
    padded = np.concatenate([wave, np.zeros(int(tail * 16000), np.float32)])
    want = our_greedy_tokens(model, tok, SHERPA, C, LEFT, [padded])[0]
    assert len(session.replies) > 2 and session.finals  # partial results while streaming, then the final one
    got = symbols_to_ids(session.finals[-1].nbest[0]["tokens"], read_tokens(out / "tokens.txt"))
    assert got == want and len(want) > 10


@pytest.mark.skipif(not sherpa_installed(), reason="pip install sherpa-onnx==2.0.1 (the dev extra)")
def test_check_sherpa_script_reports_the_identical_fraction_and_both_wers(trained_export, tmp_path):
    corpus, ckpt, out = trained_export
    res = subprocess.run([sys.executable, str(ROOT / "scripts/check_sherpa.py"), "--checkpoint", str(ckpt),
                          "--export-dir", str(out), "--cuts", str(corpus / "cuts_test.jsonl.gz"),
                          "--json", str(tmp_path / "check.json")], capture_output=True, text=True, timeout=600,
                         cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert "identical text 4/4 (100.00%)" in res.stdout and "WER ours (streaming CTC greedy)" in res.stdout
    summary = json.loads((tmp_path / "check.json").read_text())["summary"]
    assert summary["identical"] == summary["utterances"] == 4 and summary["wer_ours"] == summary["wer_sherpa"]


def test_check_sherpa_script_without_an_export_says_how_to_make_one(tmp_path):
    res = subprocess.run([sys.executable, str(ROOT / "scripts/check_sherpa.py"), "--checkpoint", "some.ckpt",
                          "--export-dir", str(tmp_path / "none"), "--cuts", "cuts.jsonl.gz"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "no model.onnx in" in res.stderr and "--format sherpa-onnx" in res.stderr


def test_onsets_put_seeded_zeros_of_their_own_before_each_wave():
    from asr.interop.sherpa_check import with_onsets

    waves = [np.full(800, 0.5, np.float32), np.full(1600, -0.25, np.float32), np.ones(400, np.float32)] * 10
    moved = with_onsets(waves, 0.64, seed=3)
    leads = [len(m) - len(w) for m, w in zip(moved, waves)]
    assert all(0 <= n < 0.64 * 16000 for n in leads) and len(set(leads)) > 20  # drawn per wave, within the range
    assert all(not m[:n].any() and np.array_equal(m[n:], w) for m, w, n in zip(moved, waves, leads))
    assert [len(m) for m in with_onsets(waves, 0.64, seed=3)] == [len(m) for m in moved]  # seeded
    assert [len(m) for m in with_onsets(waves, 0.64, seed=4)] != [len(m) for m in moved]
    assert all(np.array_equal(m, w) for m, w in zip(with_onsets(waves, 0.0), waves))
    with pytest.raises(ValueError, match="jitter_s"):
        with_onsets(waves, -0.1)
