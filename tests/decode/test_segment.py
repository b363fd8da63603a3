"""Cutting long audio at its pauses (asr.decode.segment) and decoding the pieces (evaluate_utterances)."""

import pytest
import torch

from asr.decode.segment import PauseSegmenter
from asr.evaluation.split import EvalSet, Utterance, evaluate_utterances

LOUD, QUIET = 5.0, -10.0  # log-mel values: 65 dB apart


class Words:
    def decode(self, ids):
        return " ".join("abcdefgh"[i] for i in ids)


def levels(*runs: tuple[float, int], bins: int = 20) -> torch.Tensor:
    """(T, bins) log-mel frames, runs of (value, frames) with a little texture."""
    gen = torch.Generator().manual_seed(0)
    parts = [value + 0.3 * torch.randn(frames, bins, generator=gen) for value, frames in runs]
    return torch.cat(parts)


def test_pieces_are_the_speech_between_long_pauses_padded_into_them():
    # 1.0 s speech, 0.4 s pause, 0.8 s speech, 0.1 s pause (too short: stays inside), 0.5 s speech.
    feats = levels((QUIET, 30), (LOUD, 100), (QUIET, 40), (LOUD, 80), (QUIET, 10), (LOUD, 50), (QUIET, 60))
    pieces = PauseSegmenter(min_pause_s=0.3, pad_s=0.1).find(feats)
    assert pieces == [(20, 140), (160, 320)]
    # A shorter minimum pause also cuts at the 0.1 s one; padding never passes a pause's middle.
    assert PauseSegmenter(min_pause_s=0.1, pad_s=0.1).find(feats) == [(20, 140), (160, 255), (255, 320)]


def test_no_contrast_is_one_piece_and_clicks_in_silence_are_none():
    flat = levels((LOUD, 300))
    assert PauseSegmenter().find(flat) == [(0, 300)]
    # One click in 4 s of silence: the loud level (95th percentile) is silence too, so nothing to tell
    # apart and the file is decoded whole rather than dropped.
    assert PauseSegmenter().find(levels((QUIET, 200), (LOUD, 5), (QUIET, 200))) == [(0, 405)]
    clicks = levels(*[(QUIET, 35), (LOUD, 5)] * 10)  # 50 ms each: shorter than min_speech_s
    assert PauseSegmenter().find(clicks) == []
    assert PauseSegmenter().find(torch.zeros(0, 20)) == []


def test_a_long_piece_is_split_at_its_quietest_moment():
    # 25 s of speech with a 0.1 s dip (too short to be a pause) at 14 s, then 5 s more: over max_piece_s.
    feats = levels((LOUD, 1400), (LOUD - 8.0, 10), (LOUD, 1100))
    pieces = PauseSegmenter(max_piece_s=20.0).find(feats)
    assert len(pieces) == 2 and pieces[0][0] == 0 and pieces[-1][1] == 2510
    assert pieces[0][1] == pieces[1][0] and abs(pieces[0][1] - 1405) <= 10
    uneven = PauseSegmenter(max_piece_s=5.0).find(levels((LOUD, 2500)))
    assert all(end - start <= 500 for start, end in uneven) and uneven[0][0] == 0 and uneven[-1][1] == 2500
    assert all(a[1] == b[0] for a, b in zip(uneven, uneven[1:]))


@pytest.mark.parametrize("kwargs, match", [
    ({"min_pause_s": -0.1}, "min_pause_s"), ({"max_piece_s": 0.5}, "max_piece_s"),
    ({"threshold": 1.0}, "threshold"), ({"min_contrast_db": 0.0}, "min_contrast_db"),
])
def test_bad_settings_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PauseSegmenter(**kwargs)
    with pytest.raises(ValueError, match="one utterance"):
        PauseSegmenter().find(torch.zeros(2, 10, 20))


def test_an_utterance_cut_at_pauses_reads_as_its_pieces_decoded_alone(tiny_model):
    feats = levels((QUIET, 20), (LOUD, 90), (QUIET, 50), (LOUD, 70), (QUIET, 20))
    other = levels((LOUD, 60))
    segmenter = PauseSegmenter()
    ranges = segmenter.find(feats)
    assert len(ranges) == 2
    whole = EvalSet([Utterance("long", "a b c", feats, 2.5), Utterance("short", "d", other, 0.6)])
    cut = evaluate_utterances(tiny_model, Words(), whole, ["ctc_greedy", "attention_rescoring"], segmenter=segmenter)
    alone = EvalSet([Utterance(f"p{k}", "x", feats[s:e], (e - s) / 100) for k, (s, e) in enumerate(ranges)]
                    + [Utterance("short", "d", other, 0.6)])
    pieces = evaluate_utterances(tiny_model, Words(), alone, ["ctc_greedy", "attention_rescoring"])
    for mode in ("ctc_greedy", "attention_rescoring"):
        hyps = [r["hyp"] for r in pieces.modes[mode].records]
        joined = " ".join(h for h in hyps[:2] if h)
        records = cut.modes[mode].records
        assert [r["key"] for r in records] == ["long", "short"]  # scored whole, manifest order
        assert records[0]["hyp"] == joined and records[1]["hyp"] == hyps[2]
        assert records[0]["ref"] == "a b c"
    segments = cut.summary()["segments"]
    assert segments["pieces"] == 3
    assert segments["pause_seconds"] == pytest.approx((feats.size(0) - sum(e - s for s, e in ranges)) / 100)
    assert cut.audio_seconds == pytest.approx(3.1)
