"""scripts/stream.py end to end on a tiny random model saved in the training checkpoint format."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from asr.data.audio import load_audio
from asr.data.features import FbankExtractor
from asr.data.tokenizer import load_tokenizer, write_char_units
from asr.decode import decode_batch
from asr.model.asr_model import build_asr_model
from asr.train.checkpoint import TOKENIZER_KEY, load_model, pack_tokenizer

ROOT = Path(__file__).resolve().parents[2]
from asr.cli import stream  # noqa: E402


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("ckpt")
    units = write_char_units(["abc de"], tmp / "tok")
    tok = load_tokenizer(units)
    kwargs = dict(
        vocab_size=tok.vocab_size, sos_eos_id=tok.sos_eos_id, blank_id=tok.blank_id,
        encoder_kwargs=dict(pos_enc="rel_xl", input_dim=80, d_model=32, num_heads=2, num_layers=1, ffn_dim=64,
                            conv_kernel=3, causal=True),
        decoder_layers=1, r2l_decoder_layers=1, decoder_heads=2, decoder_ffn_dim=64, reverse_weight=0.3,
    )
    torch.manual_seed(0)
    model = build_asr_model(**kwargs)
    # A CMVN that puts fbank values near zero mean, so the random model does not output only blanks.
    model.encoder.set_cmvn(torch.full((80,), -5.0), torch.full((80,), 0.5))
    path = tmp / "tiny.ckpt"
    torch.save(
        {
            "state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
            "hyper_parameters": {"model_kwargs": kwargs, "cfg": {}},
            TOKENIZER_KEY: pack_tokenizer(units),
        },
        path,
    )
    return path


@pytest.fixture(scope="module")
def audio_files(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("audio")
    rng = np.random.default_rng(0)
    mono = tmp / "mono16k.wav"
    sf.write(mono, 0.1 * rng.standard_normal(16000 * 2).astype(np.float32), 16000)
    stereo = tmp / "stereo8k.flac"
    sf.write(stereo, 0.1 * rng.standard_normal((8000 * 3, 2)).astype(np.float32), 8000)
    corrupt = tmp / "corrupt.wav"
    corrupt.write_bytes(b"RIFF not really a wav")
    nan = tmp / "nan.wav"
    samples = 0.1 * rng.standard_normal(16000).astype(np.float32)
    samples[8000] = np.nan
    sf.write(nan, samples, 16000, subtype="FLOAT")
    return {"mono": mono, "stereo": stereo, "corrupt": corrupt, "missing": tmp / "missing.wav", "nan": nan}


def test_help_runs_as_a_script():
    res = subprocess.run([sys.executable, str(ROOT / "scripts/stream.py"), "--help"], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0 and "--chunk-ms" in res.stdout and "Usage" in res.stdout


def test_streams_good_files_reports_bad_ones_and_matches_offline_decoding(checkpoint, audio_files, capsys):
    files = [audio_files[k] for k in ("mono", "missing", "nan", "stereo", "corrupt")]
    argv = ["--checkpoint", str(checkpoint), "--chunk-ms", "320", "--chunk-size", "4", "--left-chunks", "2",
            "--beam", "4", "--reverse-weight", "0.3"] + [str(f) for f in files]
    code = stream.main(argv)
    out, err = capsys.readouterr()
    assert code == 1
    err_lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(err_lines) == 3 and "missing.wav" in err_lines[0] and "corrupt.wav" in err_lines[2]
    assert "nan.wav" in err_lines[1] and "non-finite samples (NaN or inf)" in err_lines[1]
    assert err.splitlines()[-1] == "3 of 5 inputs failed"
    assert "Traceback" not in err
    assert "== mono16k.wav (2.00 s)" in out and "== stereo8k.flac (3.00 s)" in out
    assert out.count("RTF ") == 2 and out.count("p95 ") == 2
    finals = [line.split("final:", 1)[1].strip() for line in out.splitlines() if line.strip().startswith("final:")]
    assert len(finals) == 2
    # The streamed final text equals offline attention rescoring under the same chunk mask.
    model, tok, _ = load_model(checkpoint)
    for path, final in zip([audio_files["mono"], audio_files["stereo"]], finals):
        feats = FbankExtractor()(load_audio(path))[None]
        hyp = decode_batch(model, feats, torch.tensor([feats.size(1)]), "attention_rescoring", beam=4,
                           chunk_size=4, left_chunks=2, ctc_weight=0.5, reverse_weight=0.3)[0]
        assert final == tok.decode(hyp)
    assert any(f for f in finals)


def test_bad_checkpoint_and_arguments(audio_files, tmp_path, capsys):
    assert stream.main(["--checkpoint", str(tmp_path / "nope.ckpt"), str(audio_files["mono"])]) == 2
    assert capsys.readouterr().err == f"error: checkpoint {str(tmp_path / 'nope.ckpt')!r} does not exist\n"
    with pytest.raises(SystemExit):
        stream.main(["--checkpoint", "x", "--chunk-size", "0", "a.wav"])
    assert "--chunk-size (0)" in capsys.readouterr().err


def test_percentile_is_nearest_rank():
    assert stream.percentile([5.0, 1.0, 3.0, 2.0, 4.0], 50) == 3.0
    assert stream.percentile(list(map(float, range(1, 101))), 95) == 95.0
    assert stream.percentile([7.0], 95) == 7.0


def test_hotwords_bias_the_stream_as_they_bias_offline_decoding(checkpoint, audio_files, tmp_path, capsys):
    from asr.decode.hotwords import HotwordCompiler, read_hotwords

    hot = tmp_path / "hot.txt"
    # beam 9: every token of the tiny vocabulary is tried each frame, so the list surely changes the result
    hot.write_text("# phrases\nabc:30\nde\n", encoding="utf-8")
    argv = ["--checkpoint", str(checkpoint), "--chunk-ms", "320", "--chunk-size", "4", "--left-chunks", "2",
            "--beam", "9", "--reverse-weight", "0.3", "--hotwords", str(hot), "--hotword-score", "3",
            str(audio_files["mono"])]
    assert stream.main(argv) == 0
    final = [line.split("final:", 1)[1].strip() for line in capsys.readouterr().out.splitlines()
             if line.strip().startswith("final:")][0]
    model, tok, _ = load_model(checkpoint)
    biasing = HotwordCompiler(tok, 3.0).compile(read_hotwords(hot))
    feats = FbankExtractor()(load_audio(audio_files["mono"]))[None]
    lens = torch.tensor([feats.size(1)])
    hyp = decode_batch(model, feats, lens, "attention_rescoring", beam=9, chunk_size=4, left_chunks=2,
                       ctc_weight=0.5, reverse_weight=0.3, biasing=biasing)[0]
    plain = decode_batch(model, feats, lens, "attention_rescoring", beam=9, chunk_size=4, left_chunks=2,
                         ctc_weight=0.5, reverse_weight=0.3)[0]
    assert final == tok.decode(hyp) and hyp != plain
    hot.write_text("xyz\n", encoding="utf-8")
    assert stream.main(argv) == 2
    assert "cannot spell" in capsys.readouterr().err
