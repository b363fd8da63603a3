"""The robustness benchmark: its own backgrounds, mixing at an SNR, and one short run against a real server."""

import ast
import json
from pathlib import Path

import numpy as np
import pytest

from asr.bench import backgrounds as bg
from asr.bench.robust import (Condition, RobustConfig, conditions, finals_per_session, format_tables, mixed,
                              run_robust, summary_row)
from asr.bench.robust_plot import plot_wer_against_snr, wer_by_kind
from asr.data.features import SAMPLE_RATE
from tests.bench.noise_cuts import write_noise_cuts
from tests.serve.helpers import save_checkpoint

SR = SAMPLE_RATE


def _speech(seconds=1.0, seed=0):
    """A voiced-like burst with 0.1 s of silence either side (as synthesized sentences have)."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * SR)) / SR
    body = 0.2 * np.sin(2 * np.pi * 140 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t)) + 0.01 * rng.standard_normal(t.size)
    return np.concatenate([np.zeros(SR // 10), body, np.zeros(SR // 10)])


def _band_db(x, low, high):
    power = np.abs(np.fft.rfft(x)) ** 2
    freqs = np.fft.rfftfreq(x.size, 1 / SR)
    return 10 * np.log10(power[(freqs >= low) & (freqs < high)].mean())


def test_backgrounds_are_seeded_and_unit_rms():
    for kind in ("white", "pink", "music"):
        a = bg.additive(kind, 3 * SR, np.random.default_rng(5))
        b = bg.additive(kind, 3 * SR, np.random.default_rng(5))
        c = bg.additive(kind, 3 * SR, np.random.default_rng(6))
        assert np.array_equal(a, b) and not np.array_equal(a, c)
        assert np.sqrt(np.mean(a**2)) == pytest.approx(1.0, rel=1e-9)


def test_white_is_uniform_and_flat_pink_falls_ten_db_a_decade():
    w = bg.white(10 * SR, np.random.default_rng(0))
    assert np.max(np.abs(w)) <= 1.01 * np.sqrt(3)  # uniform on [-a, a] with RMS 1 has a = sqrt(3)
    assert np.mean(w**4) == pytest.approx(1.8, abs=0.05)  # the uniform's kurtosis (a Gaussian's is 3)
    assert abs(_band_db(w, 200, 400) - _band_db(w, 4000, 8000)) < 1.0
    p = bg.pink(10 * SR, np.random.default_rng(0))
    slope = _band_db(p, 400, 600) - _band_db(p, 4000, 6000)  # one decade apart
    assert slope == pytest.approx(10.0, abs=1.5)


def test_music_is_tonal():
    x = bg.music(8 * SR, np.random.default_rng(1))
    power = np.abs(np.fft.rfft(x)) ** 2
    assert np.sort(power)[-20:].sum() / power.sum() > 0.05  # a few partials hold much of the power; noise: ~0
    noise = np.abs(np.fft.rfft(bg.white(8 * SR, np.random.default_rng(1)))) ** 2
    assert np.sort(noise)[-20:].sum() / noise.sum() < 0.01


def test_at_snr_is_exact_in_float64():
    speech = _speech()
    noise = bg.pink(speech.size, np.random.default_rng(2))
    for snr in (20.0, 10.0, 5.0):
        scaled = bg.at_snr(noise, bg.speech_power(speech), snr)
        assert 10 * np.log10(bg.speech_power(speech) / np.mean(scaled**2)) == pytest.approx(snr, abs=1e-9)
    with pytest.raises(ValueError, match="silent"):
        bg.at_snr(np.zeros(10), 1.0, 10.0)


def _t20_low_band(ir):
    """T20 (s) of the reverberant part of an impulse response below 1.5 kHz, from its energy decay curve."""
    tail = ir.copy()
    tail[0] = 0.0
    n = 2 * tail.size
    low = np.fft.irfft(np.fft.rfft(tail, n) * (np.fft.rfftfreq(n, 1 / SR) < 1500), n)[: tail.size]
    edc = 10 * np.log10(np.cumsum(low[::-1] ** 2)[::-1] / np.sum(low**2))
    return 3 * (np.argmax(edc < -25) - np.argmax(edc < -5)) / SR


def test_room_impulse_starts_with_the_direct_path_and_decays_with_its_reverberation_time():
    t20 = []
    for rt60 in (0.3, 0.6, 0.9):
        ir = bg.room_impulse(rt60, np.random.default_rng(3))  # the same room, other walls
        assert ir[0] == 1.0 and np.all(np.abs(ir[1:]) < 1.0)
        t20.append(_t20_low_band(ir))
        assert 0.5 * rt60 <= t20[-1] <= 1.2 * rt60  # early reflections fall faster than the diffuse tail
    assert t20 == sorted(t20)
    with pytest.raises(ValueError, match="rt60_s"):
        bg.room_impulse(5.0, np.random.default_rng(0))


def test_reverberate_keeps_the_length_and_speech_power():
    speech = _speech()
    wet = bg.reverberate(speech, bg.room_impulse(0.6, np.random.default_rng(4)))
    assert wet.shape == speech.shape
    assert bg.speech_power(wet) == pytest.approx(bg.speech_power(speech), rel=1e-6)
    assert not np.allclose(wet, speech)


def test_babble_sums_talkers_at_equal_level():
    talkers = [[_speech(0.5, k) * (k + 1), _speech(0.7, k + 10)] for k in range(3)]
    x = bg.babble(4 * SR, talkers, np.random.default_rng(0))
    assert x.shape == (4 * SR,) and np.sqrt(np.mean(x**2)) == pytest.approx(1.0)
    assert np.array_equal(x, bg.babble(4 * SR, talkers, np.random.default_rng(0)))
    picked = bg.additive("babble", 2 * SR, np.random.default_rng(0), talkers=lambda: talkers)
    assert picked.shape == (2 * SR,)
    with pytest.raises(ValueError, match="talker"):
        bg.babble(SR, [[]], np.random.default_rng(0))


def test_the_benchmark_uses_no_training_generator():
    """Its sources import nothing from the corpus's generators, and its babble text is its own."""
    root = Path(bg.__file__).parent
    for name in ("backgrounds.py", "robust.py"):
        tree = ast.parse((root / name).read_text())
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert not {m for m in imported if m and m.startswith("asr.synth") and m != "asr.synth.xengine"}, name
    from asr.synth.sentences import SentenceGenerator, sentence_rng

    gen = SentenceGenerator()
    drawn = {gen(sentence_rng(0, split, i, 0)) for split in ("train", "dev", "test") for i in range(300)}
    assert not drawn & set(bg.BABBLE_SENTENCES)


def test_conditions_and_mixing():
    rows = conditions(("white", "reverb"), (20.0, 5.0), (0.3,))
    assert [r.name for r in rows] == ["clean", "white@20dB", "white@5dB", "reverb@0.3s"]
    with pytest.raises(ValueError, match="valid: babble"):
        conditions(("rain",), (10.0,), ())
    speech = _speech()
    assert mixed(speech, Condition("clean"), 0, 0) is speech
    a, b = mixed(speech, Condition("music", 10.0), 0, 3), mixed(speech, Condition("music", 20.0), 0, 3)
    # the same background samples at both SNRs: 10 dB apart exactly
    assert np.mean((a - speech) ** 2) / np.mean((b - speech) ** 2) == pytest.approx(10.0)
    assert 10 * np.log10(bg.speech_power(speech) / np.mean((a - speech) ** 2)) == pytest.approx(10.0)
    assert np.array_equal(a, mixed(speech, Condition("music", 10.0), 0, 3))


def _tiny_run(tmp_path, sessions: int, server_args: tuple[str, ...] = ()):
    config = RobustConfig(checkpoint=str(save_checkpoint(tmp_path)), cuts=str(write_noise_cuts(tmp_path)),
                          kinds=("white", "reverb"), snrs_db=(10.0,), rt60s_s=(0.3,), utterances=3,
                          sessions=sessions, sentences=3, chunk_size=4, left_chunks=2, mode="ctc_greedy",
                          concurrency=4, max_seconds=120.0, replicates=50,
                          server_args=("--chunk-size", "4", "--left-chunks", "2", "--beam", "2", *server_args))
    report = run_robust(config, log=lambda line: None)
    json.dumps(report)
    assert report["conditions"] == ["clean", "white@10dB", "reverb@0.3s"]
    for name in report["conditions"]:
        alone = report["alone"][name]
        assert alone["words"] == 5 and alone["low"] <= alone["wer"] <= alone["high"]
        assert ("vs_clean" in alone) == (name != "clean")
    return report


def test_a_tiny_model_reads_sentences_alone_under_every_condition(tmp_path):
    report = _tiny_run(tmp_path, sessions=0)
    assert "sessions" not in report
    assert format_tables(report).count("| white@10dB |") == 1
    assert summary_row(report)["worst_session_difference"] is None
    table = format_tables(report).splitlines()
    for name, row in report["alone"].items():  # the errors split, and the table shows the split
        assert row["substitutions"] + row["deletions"] + row["insertions"] == row["errors"]
        split = f"{row['substitutions']} / {row['deletions']} / {row['insertions']} |"
        assert any(line.startswith(f"| {name} |") and line.endswith(split) for line in table)
    by_kind, clean = wer_by_kind(report)  # a real report plots: every background, each at its levels
    assert sorted(by_kind) == sorted({c.split("@")[0] for c in report["conditions"]} - {"clean"})
    assert clean is not None and plot_wer_against_snr([("tiny", report)], tmp_path / "robust.png").is_file()


def test_a_server_that_does_not_start_leaves_the_sentences_alone_in_the_report(tmp_path):
    report = _tiny_run(tmp_path, sessions=1, server_args=("--no-such-option",))
    assert set(report["sessions"]) == set(report["conditions"])
    for row in report["sessions"].values():
        assert row["not_run"].startswith("the server (asr.cli.serve) did not start within 120 s")
        assert "--no-such-option" in row["not_run"]  # the server's own complaint, from its stderr
    table = format_tables(report)
    assert table.count("| white@10dB | not run: the server") == 1 and table.count("| white@10dB |") == 2
    header = next(line for line in table.splitlines() if line.startswith("| condition | sessions |"))
    # one cell a column: the server's complaint (its usage line has '|') is escaped and on one line
    assert all(line.replace("\\|", "").count("|") == header.count("|")
               for line in table.splitlines() if "| not run: " in line)
    assert summary_row(report)["worst_session_difference"] is None


def test_finals_count_every_final_and_apart_those_with_words():
    details = [{"finals": [{"text": "a b"}, {"text": " "}, {"text": "c"}]}, {"finals": [{"text": ""}]}]
    assert finals_per_session(details) == 2.0 and finals_per_session(details, worded=True) == 1.0
    assert finals_per_session([]) is None and finals_per_session([], worded=True) is None
    row = {"sessions": 2, "failed_sessions": {}, "finals_per_session": 2.0, "worded_finals_per_session": 1.0,
           "gaps": 8, "gaps_fused": 0, "gaps_late": 0, "inserted_words": 1, "alone_inserted_words": 0,
           "session": {"wer": 0.2, "low": 0.1, "high": 0.3}, "alone": {"wer": 0.2, "low": 0.1, "high": 0.3},
           "difference": {"difference": 0.0, "low": -0.1, "high": 0.1}}
    report = {"config": {"sentences": 5}, "conditions": ["clean"],
              "alone": {"clean": {"wer": 0.2, "low": 0.1, "high": 0.3}}, "sessions": {"clean": row}}
    assert "| 2.00; 1.00 | 0/8 |" in format_tables(report)
    # a report written before the count existed still prints
    del row["worded_finals_per_session"]
    assert "| 2.00; - | 0/8 |" in format_tables(report)
    # the first sentences' errors, and a report written before they were counted
    assert format_tables(report).endswith("| 1 / 0 | - |")
    row["first_sentence"] = {"session_errors": 3, "alone_errors": 1, "words": 14}
    table = format_tables(report).splitlines()
    assert table[-1].endswith("| 1 / 0 | 3 / 1 (14) |")
    assert table[-1].count("|") == table[-3].count("|") == table[-2].count("|")  # row, header and rule agree


def test_the_server_start_time_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="server_start_s"):
        RobustConfig(checkpoint="x", cuts="y", server_start_s=0.0)


@pytest.mark.slow
def test_sessions_through_a_real_server(tmp_path):
    report = _tiny_run(tmp_path, sessions=1)
    for name in report["conditions"]:
        session = report["sessions"][name]
        assert session["sessions"] == 1 and session["failed_sessions"] == {} and session["gaps"] == 2
        assert session["session"]["words"] == 5 and session["finals_per_session"] >= 1
        assert 0 <= session["worded_finals_per_session"] <= session["finals_per_session"]
        (detail,) = session["details"]  # the session's own record: its finals and the sentences alone
        assert len(detail["refs"]) == len(detail["alone"]) == len(detail["speech_s"])
        assert len(detail["finals"]) == session["finals_per_session"]
        first = session["first_sentence"]
        assert first["words"] == len(detail["refs"][0].split()) and first["alone_errors"] <= first["words"]
    assert format_tables(report).count("| white@10dB |") == 2
    assert summary_row(report)["worst_session_difference"] is not None


def test_the_lm_options_reach_the_sentences_alone_and_the_server(tmp_path):
    from asr.lm import save_arpa, token_names, train_token_lm
    from asr.train.checkpoint import load_model

    checkpoint, cuts = str(save_checkpoint(tmp_path)), str(write_noise_cuts(tmp_path))
    tokenizer = load_model(checkpoint)[1]
    lm = save_arpa(train_token_lm(["abc de fgh", "fgh abc", "de de abc"], tokenizer, 3), tmp_path / "lm.arpa.gz",
                   token_names(tokenizer))

    def errors(*lm_args):
        config = RobustConfig(checkpoint=checkpoint, cuts=cuts, kinds=("white",),
                              snrs_db=(10.0,), utterances=3, sessions=0, chunk_size=4, left_chunks=2,
                              mode="attention_rescoring", replicates=50, server_args=("--beam", "2"), lm_args=lm_args)
        report = run_robust(config, log=lambda line: None)
        return config, report, [report["alone"][name]["errors"] for name in report["conditions"]]

    _, _, plain = errors()
    config, report, silent = errors("--lm", str(lm), "--lm-weight", "0", "--length-bonus", "0")
    assert silent == plain  # weight 0: the same decoding
    config, report, strong = errors("--lm", str(lm), "--lm-weight", "3", "--length-bonus", "2")
    assert strong != plain  # the fusion reached the decoding, so the equality above meant something
    assert config.served_args == ("--beam", "2", "--lm", str(lm), "--lm-weight", "3", "--length-bonus", "2")
    assert f"with the LM (--lm {lm}" in format_tables(report)
    with pytest.raises(ValueError, match="--lm-wieght"):
        RobustConfig(checkpoint="x", cuts="y", lm_args=("--lm-wieght", "1"))
