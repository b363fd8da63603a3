"""The live benchmark: sessions and backgrounds, the word-to-sentence scoring, and one run against a real server."""

import json

import numpy as np
import pytest

from asr.bench.live_score import Final, Heard, Word, align, gap_outcomes, score_alone, score_session, summarize
from asr.bench.live_sessions import (ALONE_LEAD_S, BACKGROUNDS, DC_OFFSET, FAN_BAND_HZ, HUM_DBFS, ROOM_NOISE_DBFS,
                                     Sentence, Timing, alone, background, check_backgrounds, plan_sessions, render,
                                     rms_dbfs, session_background, speech_bounds)
from asr.data.features import SAMPLE_RATE
from asr.decode.wer import ErrorCounter

SR = SAMPLE_RATE


def _sentences(count: int, seed: int = 0) -> list[Sentence]:
    """Tone bursts with 0.1 s of silence either side, as synthesized sentences have."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        body = 0.2 * np.sin(2 * np.pi * 300 * np.arange(int((0.5 + 0.1 * i) * SR)) / SR)
        audio = np.concatenate([np.zeros(SR // 10), body * (1 + 0.1 * rng.random()), np.zeros(SR // 10)])
        out.append(Sentence(f"cut{i}", f"word{i} next{i} last{i}", audio))
    return out


# ---- backgrounds ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name,dbfs", [("white-90", -90.0), ("white-70", -70.0), ("white-50", -50.0)])
def test_white_floors_have_their_level(name, dbfs):
    x = background(name, 3 * SR, np.random.default_rng(1))
    assert abs(rms_dbfs(x) - dbfs) < 0.5
    assert abs(np.mean(x)) < 10 ** (dbfs / 20) / 10  # centred


def test_zeros_are_exact_and_dc_is_an_offset_over_a_floor():
    assert not np.any(background("zeros", SR, np.random.default_rng(0)))
    dc = background("dc", 2 * SR, np.random.default_rng(0))
    assert abs(np.mean(dc) - DC_OFFSET) < 1e-4
    assert abs(rms_dbfs(dc - np.mean(dc)) + 70.0) < 0.5


def _band_share(x, low, high):
    power = np.abs(np.fft.rfft(x)) ** 2
    freqs = np.fft.rfftfreq(len(x), 1 / SR)
    return power[(freqs >= low) & (freqs <= high)].sum() / power.sum()


def test_room_tone_is_hum_and_pink_noise_at_their_levels():
    x = background("room", 4 * SR, np.random.default_rng(2))
    expected = 10 * np.log10(10 ** (HUM_DBFS / 10) + 10 ** (ROOM_NOISE_DBFS / 10))
    assert abs(rms_dbfs(x) - expected) < 0.5
    hum = sum(_band_share(x, 50 * k - 1, 50 * k + 1) for k in range(1, 7))  # mains and harmonics
    assert abs(10 * np.log10(hum) + rms_dbfs(x) - HUM_DBFS) < 0.5
    power = np.abs(np.fft.rfft(x)) ** 2
    assert np.argmax(power) * SR / len(x) == pytest.approx(50.0, abs=0.5)


def test_fan_is_band_noise():
    x = background("fan", 2 * SR, np.random.default_rng(3))
    assert abs(rms_dbfs(x) + 50.0) < 0.5
    assert _band_share(x, *FAN_BAND_HZ) > 0.999


def test_unknown_background_lists_the_valid_ones():
    with pytest.raises(ValueError, match="valid: " + ", ".join(BACKGROUNDS)):
        check_backgrounds(["zeros", "rain"])


# ---- sessions --------------------------------------------------------------------------------------------


def test_speech_bounds_skip_the_silence_around_speech():
    audio = _sentences(1)[0].audio
    onset, end = speech_bounds(audio)
    assert onset == SR // 10 and end == len(audio) - SR // 10


def test_sessions_are_deterministic_and_keep_speech_and_transcripts_untouched():
    sentences = _sentences(6)
    texts = [s.text for s in sentences]
    timing = Timing(lead_in_s=(0.0, 3.0), pause_s=(0.3, 3.0), tail_s=(0.5, 2.0))
    plans = plan_sessions(sentences, 2, 3, seed=7, timing=timing)
    again = plan_sessions(sentences, 2, 3, seed=7, timing=timing)
    layout = [[(p.sentence.cut_id, p.start, p.speech) for p in plan.placed] + [plan.samples] for plan in plans]
    assert layout == [[(p.sentence.cut_id, p.start, p.speech) for p in plan.placed] + [plan.samples] for plan in again]
    other = plan_sessions(sentences, 2, 3, seed=8, timing=timing)
    assert layout != [[(p.sentence.cut_id, p.start, p.speech) for p in plan.placed] + [plan.samples] for plan in other]
    assert sorted(p.sentence.cut_id for plan in plans for p in plan.placed) == [f"cut{i}" for i in range(6)]
    assert [s.text for s in sentences] == texts
    for plan in plans:
        assert 0 <= plan.placed[0].start <= 3 * SR
        for a, b in zip(plan.placed, plan.placed[1:]):
            assert 0.3 * SR <= b.start - a.end <= 3 * SR
        assert 0.5 * SR <= plan.samples - plan.placed[-1].end <= 2 * SR
        bg = session_background(plan, "room", seed=7)
        assert np.array_equal(bg, session_background(plan, "room", seed=7))
        session = render(plan, bg)
        assert np.array_equal(session, render(plan, session_background(plan, "room", seed=7)))
        pad = (len(bg) - plan.samples) // 2
        under = bg[pad : pad + plan.samples]  # the background under the session
        for p in plan.placed:  # the speech is added to the background, sample for sample
            np.testing.assert_allclose(session[p.start : p.end] - under[p.start : p.end], p.sentence.audio, atol=1e-12)
        clip, (onset, end) = alone(plan.placed[1], bg)
        lead = int(ALONE_LEAD_S * SR)
        p = plan.placed[1]
        np.testing.assert_allclose(clip[lead : lead + len(p.sentence.audio)] - under[p.start : p.end],
                                   p.sentence.audio, atol=1e-12)
        assert (onset, end) == (p.speech[0] - p.start + lead, p.speech[1] - p.start + lead)


def test_too_few_sentences_is_a_clear_error():
    with pytest.raises(ValueError, match="need 6 sentences; 4 given"):
        plan_sessions(_sentences(4), 2, 3, seed=0)


# ---- scoring --------------------------------------------------------------------------------------------

REFS = ["go to the", "the end now", "then stop"]
SPANS = [(1.0, 2.0), (3.0, 4.0), (6.0, 7.0)]


def _words(*items):
    """Words from (text, mid time) pairs, 0.2 s long each."""
    return tuple(Word(t, m - 0.1, m + 0.1) for t, m in items)


def test_a_repeated_word_at_a_boundary_goes_to_the_sentence_it_was_spoken_in():
    # one "the" heard, spoken in sentence 1's time: sentence 2 lost its first word
    early = align(REFS[:2], SPANS[:2], list(_words(("go", 1.2), ("to", 1.5), ("the", 1.8), ("end", 3.5), ("now", 3.8))))
    assert early.ops == ("ok", "ok", "ok", "del", "ok", "ok") and not early.first_word_ok(1)
    late = align(REFS[:2], SPANS[:2], list(_words(("go", 1.2), ("to", 1.5), ("the", 3.1), ("end", 3.5), ("now", 3.8))))
    assert late.ops == ("ok", "ok", "del", "ok", "ok", "ok") and late.first_word_ok(1)
    assert early.sentence_errors == (0, 1) and late.sentence_errors == (1, 0)


def test_session_errors_are_the_concatenated_wer_and_insertions_go_to_the_nearest_sentence():
    hyp = _words(("go", 1.2), ("to", 1.5), ("a", 1.6), ("the", 1.8), ("uh", 5.0), ("the", 3.1), ("and", 3.5),
                 ("then", 6.2), ("stop", 6.6), ("oh", 6.9))
    a = align(REFS, SPANS, list(hyp))
    counter = ErrorCounter()
    counter.add(" ".join(REFS), " ".join(w.text for w in hyp))
    assert a.errors == counter.word_errors == 5  # a, uh, oh inserted; end -> and; now deleted
    assert a.sentence_errors == (1, 3, 1)  # "uh" at 5.0 s: nearer sentence 2 (ends 4.0) than 3 (starts 6.0)


def _final(start, end, *items):
    return Final(_words(*items), start, end)


def test_clean_late_and_fused_gaps():
    # utterances start at 2.6 (in the pause: clean), 3.3 (inside sentence 2: late), none between 2 and 3
    assert gap_outcomes(SPANS, [2.6]) == (["clean", "fused"], 0)
    assert gap_outcomes(SPANS, [3.3]) == (["late", "fused"], 0)
    assert gap_outcomes(SPANS, [2.6, 3.5, 5.0]) == (["clean", "clean"], 1)  # 3.5: a split inside sentence 2
    assert gap_outcomes(SPANS, [3.3, 3.6]) == (["late", "fused"], 1)


def test_a_late_endpoint_loses_the_first_word_a_fused_pair_shares_a_final():
    heard = Heard((_final(0.0, 3.24, ("go", 1.2), ("to", 1.5), ("the", 1.8)),  # endpoint at 3.24: after 3.0
                   _final(3.24, 8.0, ("end", 3.5), ("now", 3.8), ("then", 6.2), ("stop", 6.6))),
                  (1.6, 4.2))
    score = score_session(REFS, SPANS, heard)
    assert score.gaps == ("late", "fused") and score.endpoints == 1 and score.splits == 0
    assert [s.first_ok for s in score.sentences] == [True, False, True]
    assert [s.errors for s in score.sentences] == [0, 1, 0]
    # latency only where the utterance started cleanly: the first sentence (1.6 s sent, onset 1.0)
    assert score.sentences[0].latency_s == pytest.approx(0.6)
    assert [s.latency_s for s in score.sentences[1:]] == [None, None]


def test_a_clean_endpoint_with_a_missed_first_word():
    heard = Heard((_final(0.0, 2.56, ("go", 1.2), ("to", 1.5), ("the", 1.8)),
                   _final(2.56, 5.12, ("end", 3.5), ("now", 3.8)),
                   _final(5.12, 8.0, ("then", 6.2), ("stop", 6.6))),
                  (1.5, 2.9, 6.5))
    score = score_session(REFS, SPANS, heard)
    assert score.gaps == ("clean", "clean") and score.endpoints == 2
    assert [s.first_ok for s in score.sentences] == [True, False, True]
    # words arrived at 2.9 s, before sentence 2's speech (3.0): early, no latency
    assert score.sentences[1].latency_s is None and score.sentences[1].early
    assert score.sentences[2].latency_s == pytest.approx(0.5)
    alone = [score_alone(ref, (0.3, 1.3), Heard((_final(0.0, 1.8, *[(w, 0.5 + 0.2 * k) for k, w in
                                                                     enumerate(ref.split())]),), (0.8,)))
             for ref in REFS]
    summary = summarize([score], [alone])
    assert summary["session_wer"] == pytest.approx(1 / 8) and summary["alone_wer"] == 0.0
    assert summary["first_word_after_endpoint"] == {"sentences": 2, "session_right": 1, "alone_right": 2}
    assert summary["gaps_clean"] == 2 and summary["endpoints"] == 2
    assert summary["first_word_latency_s"]["sentences"] == 2  # sentences 1 and 3: timed in both
    assert summary["by_position"][1] == {"position": 2, "session_wer": pytest.approx(1 / 3), "alone_wer": 0.0,
                                         "words": 3}


# ---- end to end ------------------------------------------------------------------------------------------


def test_bench_runs_against_a_real_server(tmp_path):
    from asr.bench.live import LiveConfig, format_table, run_live
    from tests.bench.noise_cuts import write_noise_cuts
    from tests.serve.helpers import save_checkpoint

    ckpt = save_checkpoint(tmp_path)
    cuts = write_noise_cuts(tmp_path)
    config = LiveConfig(checkpoint=str(ckpt), cuts=str(cuts), sessions=1, sentences=3,
                        backgrounds=("zeros", "white-70"), timing=Timing((0.2, 0.5), (0.3, 1.5), (0.5, 1.0)),
                        speed=4.0, concurrency=4, max_seconds=60.0,
                        server_args=("--chunk-size", "4", "--left-chunks", "2", "--beam", "2"))
    report = run_live(config, log=lambda line: None)
    json.dumps(report)  # the report is plain JSON
    assert set(report["backgrounds"]) == {"zeros", "white-70"}
    for name, b in report["backgrounds"].items():
        assert b["failed_sessions"] == {} and b["sessions"] == 1 and b["sentences"] == 3 and b["ref_words"] == 5
        assert b["gaps"] == 2 and b["gaps_clean"] + b["gaps_late"] + b["gaps_fused"] == 2
    for session in report["sessions"]:
        finals = session["finals"]
        assert finals[0]["start_s"] == 0.0 and finals[-1]["end_s"] <= session["seconds"]
        assert all(a["end_s"] == b["start_s"] for a, b in zip(finals, finals[1:]))  # contiguous in stream time
        assert len(session["alone"]) == 3
    table = format_table(report)
    assert table.count("\n| zeros |") == 2 and "| white-70 | 1 |" in table
