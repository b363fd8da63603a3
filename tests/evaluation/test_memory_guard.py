"""The decoding memory guard: estimates, and an evaluation under a tiny budget that switches one
utterance to the blocked attention or skips it with advice while the rest is decoded and counted."""

import pytest
import torch

from asr.data.features import FRAME_SHIFT_S
from asr.evaluation.memory import estimate_encode_bytes, format_bytes, parse_bytes, plan_batch
from asr.evaluation.split import EvalSet, Utterance, evaluate_utterances
from asr.model import build_encoder
from asr.model.asr_model import AsrModel
from asr.model.scorers import blocked as blocked_attention


class Words:
    def decode(self, ids):
        return " ".join("abcdefgh"[i] for i in ids)


def tiny(pos_enc="rel_xl"):
    torch.manual_seed(0)
    enc = build_encoder(pos_enc=pos_enc, input_dim=80, d_model=32, num_heads=2, num_layers=1, ffn_dim=64,
                        conv_kernel=3, causal=True, subsampling=4)
    return AsrModel(enc, 8, 7, decoder_layers=1, decoder_heads=2, decoder_ffn_dim=64).eval()


def utts(seconds):
    gen = torch.Generator().manual_seed(1)
    return EvalSet([Utterance(f"u{i}", "a b", torch.randn(int(s / FRAME_SHIFT_S), 80, generator=gen), s)
                    for i, s in enumerate(seconds)])


def test_parse_bytes():
    assert parse_bytes("8G") == 8 << 30 and parse_bytes("512m") == 512 << 20 and parse_bytes("1.5GiB") == 3 << 29
    assert parse_bytes("1000") == 1000
    with pytest.raises(ValueError, match="8G"):
        parse_bytes("lots")


def test_sizes_are_printed_in_the_unit_they_were_given_in():
    assert [format_bytes(parse_bytes(t)) for t in ("50M", "6G", "1536M", "512k", "2T")] == \
        ["50 MiB", "6 GiB", "1.5 GiB", "512 KiB", "2 TiB"]
    assert format_bytes(1000) == "1000 bytes" and format_bytes(parse_bytes("0.3G")) == "307.2 MiB"


def test_estimates_grow_as_they_should():
    model = tiny()
    full = [estimate_encode_bytes(model, 1, f, blocked=False) for f in (16000, 32000, 64000)]
    assert full[0] < full[1] < full[2] and full[2] / full[1] > 3  # quadratic: explicit logits
    blocked = [estimate_encode_bytes(model, 1, f, blocked=True) for f in (16000, 32000, 64000)]
    assert blocked[2] < full[2] / 4 and blocked[2] / blocked[1] < 2.5  # linear in the length
    streamed = [estimate_encode_bytes(model, 1, f, 16, 4) for f in (8000, 12000, 20000)]
    # Chunked decoding with bounded left context: only the output (T' x (D + V)) grows.
    per_frame = (streamed[2] - streamed[1]) / 8000
    assert per_frame == pytest.approx((streamed[1] - streamed[0]) / 4000, rel=0.01) and per_frame < 200
    plain = tiny("abs_sin")  # no blocked path: forcing it changes nothing; a chunk mask is quadratic
    assert estimate_encode_bytes(plain, 1, 64000, 16, -1, blocked=True) == estimate_encode_bytes(plain, 1, 64000, 16, -1)
    assert estimate_encode_bytes(plain, 1, 64000, 16, -1) > 3 * estimate_encode_bytes(plain, 1, 32000, 16, -1)


def test_a_tiny_budget_switches_to_blocked_attention_or_skips_and_counts(capsys, monkeypatch):
    # Blocked steps of 2^16 logits (the estimate reads the same setting): a 40 s input is then "long".
    monkeypatch.setattr(blocked_attention, "DEFAULT_BLOCKING", blocked_attention.Blocking(pair_elements=1 << 16))
    model = tiny()
    data = utts([1.0, 40.0, 1.5])
    long_frames = data.utterances[1].feats.size(0)
    explicit = estimate_encode_bytes(model, 1, long_frames, blocked=False)
    blocked = estimate_encode_bytes(model, 1, long_frames, blocked=True)
    short = estimate_encode_bytes(model, 2, data.utterances[2].feats.size(0))
    assert short < blocked < explicit
    reference = evaluate_utterances(model, Words(), data, ["ctc_greedy"], batch_seconds=100.0)

    # Over the explicit estimate's budget, within the blocked one's: decoded, with the blocked attention.
    groups, over = plan_batch(model, [u.feats.size(0) for u in data.utterances], [0, 2, 1], 0, -1,
                              (blocked + explicit) // 2)
    assert ([1], True) in groups and not over
    guarded = evaluate_utterances(model, Words(), data, ["ctc_greedy"], batch_seconds=100.0,
                                  memory_budget=(blocked + explicit) // 2)
    assert guarded.summary()["memory"]["blocked_attention_utterances"] == 1
    assert [r["hyp"] for r in guarded.modes["ctc_greedy"].records] == \
        [r["hyp"] for r in reference.modes["ctc_greedy"].records]

    # Under both: the long one is skipped, named and counted; the other two are decoded and scored.
    result = evaluate_utterances(model, Words(), data, ["ctc_greedy"], batch_seconds=100.0,
                                 memory_budget=(short + blocked) // 2)
    assert result.skipped == {"over_memory_budget": 1}
    records = result.modes["ctc_greedy"].records
    assert [r["key"] for r in records] == ["u0", "u2"] and result.audio_seconds == pytest.approx(2.5)
    assert result.modes["ctc_greedy"].totals["utterances"] == 2
    message = capsys.readouterr().err.strip().splitlines()
    assert len(message) == 1 and "u1" in message[0] and "--chunk-size 16 --left-chunks 4" in message[0]
    assert f"over the {format_bytes((short + blocked) // 2)} memory budget" in message[0]
    assert "0.0 GiB" not in message[0]  # a budget of a few MiB, as it was printed
