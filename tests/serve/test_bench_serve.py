"""scripts/bench_serve.py end to end on loopback: one real-time client of a tiny model (a smoke run, not a timing)."""

import re
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from asr.data.features import SAMPLE_RATE
from asr.decode.options import DecodeOptions
from tests.serve.helpers import noise, save_checkpoint

ROOT = Path(__file__).resolve().parents[2]


def load_bench():
    import asr.cli.bench_serve

    return asr.cli.bench_serve


def test_bench_serve_reports_a_row_per_client_count_with_finals_equal_to_offline(tmp_path, capsys):
    ckpt = save_checkpoint(tmp_path)
    wav = tmp_path / "a.wav"
    sf.write(wav, (noise(1.2, 5, SAMPLE_RATE).numpy() * 32767).astype(np.int16), SAMPLE_RATE)
    rc = load_bench().main(["--checkpoint", str(ckpt), "--clients", "1,2", "--chunk-size", "4",
                            "--left-chunks", "2", "--beam", "2", "--max-seconds", "60", "--stagger-s", "0.2", str(wav)])
    out = capsys.readouterr().out
    assert rc == 0, out
    rows = [line for line in out.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [r.split("|")[1].strip() for r in rows] == ["1", "2"]
    assert [r.split("|")[5].strip() for r in rows] == ["1/1", "2/2"]  # the server's finals are the offline ones


def test_bench_serve_onnx_backend_needs_its_model(tmp_path, capsys):
    with pytest.raises(SystemExit):
        load_bench().parse_args(["--checkpoint", "x.ckpt", "--backend", "onnx", "a.wav"])
    assert "--backend onnx and --onnx-model go together" in capsys.readouterr().err


def test_bench_serve_passes_the_lm_to_the_server(tmp_path, capsys):
    from asr.lm import ShallowFusion, save_arpa, token_names, train_token_lm
    from asr.streaming.recognizer import StreamingRecognizer
    from asr.train.checkpoint import load_model

    ckpt = save_checkpoint(tmp_path)
    model, tokenizer, _ = load_model(str(ckpt))
    lm = train_token_lm(["abc de fgh", "fgh abc", "de de abc"], tokenizer, 3)
    lm_file = save_arpa(lm, tmp_path / "lm.arpa.gz", token_names(tokenizer))
    wave = noise(1.2, 5, SAMPLE_RATE)
    wav = tmp_path / "a.wav"
    sf.write(wav, (wave.numpy() * 32767).astype(np.int16), SAMPLE_RATE)

    def offline(fusion):
        rec = StreamingRecognizer(model.eval(), tokenizer, DecodeOptions(chunk_size=4, left_chunks=2, beam=2),
                                  fusion=fusion)
        rec.accept_waveform(wave)
        return rec.finalize()

    # this LM changes the final text, so a server without it would not match the fused reference
    assert offline(ShallowFusion(lm, 3.0, 1.0)) != offline(None)
    rc = load_bench().main(["--checkpoint", str(ckpt), "--clients", "1", "--chunk-size", "4", "--left-chunks", "2",
                            "--beam", "2", "--max-seconds", "60", "--lm", str(lm_file), "--lm-weight", "3",
                            "--length-bonus", "1", str(wav)])
    out = capsys.readouterr().out
    assert rc == 0, out
    rows = [line for line in out.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [r.split("|")[5].strip() for r in rows] == ["1/1"]


def test_bench_serve_runs_each_client_count_without_and_with_per_client_lists(tmp_path, capsys):
    ckpt = save_checkpoint(tmp_path)
    wav = tmp_path / "a.wav"
    sf.write(wav, (noise(1.2, 5, SAMPLE_RATE).numpy() * 32767).astype(np.int16), SAMPLE_RATE)
    pool = tmp_path / "pool.txt"
    pool.write_text("abc\nde\nfgh\nba\ncab\n", encoding="utf-8")
    bench = load_bench()
    assert bench.client_lists(["a", "b", "c"], 2, 2) == bench.client_lists(["a", "b", "c"], 2, 2)
    rc = bench.main(["--checkpoint", str(ckpt), "--clients", "2", "--chunk-size", "4", "--left-chunks", "2",
                     "--beam", "2", "--max-seconds", "60", "--hotwords-per-client", "3", "--hotword-pool", str(pool),
                     str(wav)])
    out = capsys.readouterr().out
    assert rc == 0, out
    rows = [line.split("|") for line in out.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [(r[1].strip(), r[5].strip(), r[7].strip()) for r in rows] == [("2", "2/2", "0"), ("2", "2/2", "3")]
    with pytest.raises(SystemExit):
        bench.parse_args(["--checkpoint", "x.ckpt", "--hotwords-per-client", "3", "a.wav"])


def test_bench_serve_list_flood_reports_reply_gaps_with_and_without_it(tmp_path, capsys):
    ckpt = save_checkpoint(tmp_path)
    wav = tmp_path / "a.wav"
    sf.write(wav, (noise(2.0, 5, SAMPLE_RATE).numpy() * 32767).astype(np.int16), SAMPLE_RATE)
    bench = load_bench()
    from asr.train.checkpoint import load_model

    _, tokenizer, _ = load_model(str(ckpt))
    starts = bench.flood_starts(tokenizer, 2)
    import json

    lists = [json.loads(s)["hotwords"] for s in starts]
    assert [len(x) for x in lists] == [2000, 2000] and lists[0] != lists[1]
    assert max(len(p) for p in lists[0]) == 100 and all(set(p) <= set("abcdefgh ") for p in lists[0])
    rc = bench.main(["--checkpoint", str(ckpt), "--clients", "1", "--chunk-size", "4", "--left-chunks", "2",
                     "--beam", "2", "--max-seconds", "60", "--list-flood", "1", str(wav)])
    out = capsys.readouterr().out
    assert rc == 0, out
    line = next(x for x in out.splitlines() if x.startswith("list flood beside 1 real-time clients: "))
    started, ready = re.search(r": (\d+) lists of 2000 phrases x 100 characters started by 1 connections \((\d+) ready",
                               line).groups()
    assert int(started) >= 1 and ready == started, line
    replies = r"latency p95 \d+ ms \(max \d+\), gap p95 \d+ ms \(max \d+\)"
    assert re.search(f"real-time replies with it: {replies}; without: {replies}; server RSS", line), line


def test_a_chunk_is_computable_once_its_lookahead_has_arrived():
    from asr.cli.bench_serve import chunk_end_samples
    from asr.data.features import samples_for_frames
    from asr.model import build_encoder

    plain = build_encoder("rel_xl", input_dim=80, d_model=16, num_heads=2)
    ahead = build_encoder("rel_xl", input_dim=80, d_model=16, num_heads=2, chunk_lookahead=3)
    first_plain, first_ahead = chunk_end_samples(10**6, 4, plain)[0], chunk_end_samples(10**6, 4, ahead)[0]
    assert first_plain == samples_for_frames(None, 7 + 4 * 3)  # subsampling window 7, rate 4, C 4
    assert first_ahead == samples_for_frames(None, 7 + 4 * 6)  # and 3 lookahead frames
