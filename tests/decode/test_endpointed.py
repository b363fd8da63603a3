"""Long inputs with endpoint resets: each utterance is encoded as a fresh stream, so it decodes as the piece
alone would; with the resets off decoding is what it was; bad settings are refused.

The tiny model's CTC head is replaced by one that hears silence: a frame whose encoder output is the
encoder's silence fixed point (what a long run of silence features converges to) is a certain blank,
any other frame a token. So the endpoint falls where the test puts silence."""

import argparse

import pytest
import torch

from asr.bench.long_form import parse_setting
from asr.cli.decode import parse_args
from asr.decode import decode_batch, long_audio
from asr.decode.batch import search_encoded
from asr.decode.ctc_greedy import ctc_greedy
from asr.decode.endpoint import EndpointConfig
from asr.decode.endpointed import endpoint_utterances, file_endpoints, search_utterances
from asr.decode.long_audio import stream_chunks
from asr.decode.pause_endpoint import PauseRule
from asr.evaluation.split import EvalSet, Utterance, evaluate_utterances
from asr.model import build_encoder
from asr.model.asr_model import AsrModel
from tests.decode.largest_tensor import LargestTensor

FEATS, CHUNK, LEFT = 20, 4, 2
SILENCE = torch.full((FEATS,), -5.0)
ENDPOINTS = file_endpoints(trailing_silence_s=0.2)  # 5 encoder frames of 40 ms


def hearing_model():
    """A tiny causal model whose CTC head reads the encoder's silence fixed point as blank (without an online
    CMN: its running mean keeps silence after speech away from that point)."""
    torch.manual_seed(0)
    enc = build_encoder(pos_enc="rel_xl", input_dim=FEATS, d_model=32, num_heads=2, num_layers=2, ffn_dim=64,
                        conv_kernel=3, causal=True, subsampling=4)
    model = AsrModel(enc, 8, 7, decoder_layers=1, decoder_heads=2, decoder_ffn_dim=64).eval()
    with torch.no_grad():
        still = torch.cat(list(stream_chunks(enc, SILENCE.expand(400, -1), CHUNK, LEFT)), dim=1)[0, -1]  # (D,)
    ctc = model.ctc_log_probs

    def ctc_log_probs(enc_out):  # (B, T', D) -> (B, T', V)
        tokens = ctc(enc_out).clone()
        tokens[..., model.blank_id] = -1e4  # a token at every frame that is not silence
        blank = torch.full_like(tokens, -1e4)
        blank[..., model.blank_id] = 0.0
        silent = (enc_out - still).norm(dim=-1, keepdim=True) < 2.0
        return torch.where(silent, blank, tokens.log_softmax(-1))

    model.ctc_log_probs = ctc_log_probs
    return model


def speech(frames, seed):
    return torch.randn(frames, FEATS, generator=torch.Generator().manual_seed(seed))


def alone(model, feats):
    """(1, T', D): ``feats`` (T, F) encoded from a fresh state."""
    with torch.no_grad():
        return torch.cat(list(stream_chunks(model.encoder, feats, CHUNK, LEFT)), dim=1)


def test_two_sentences_apart_decode_each_as_a_fresh_stream():
    model = hearing_model()
    feats = torch.cat([speech(200, 1), SILENCE.expand(200, -1), speech(200, 2)])  # (600, F)
    seen = []
    with torch.no_grad():
        utts = list(endpoint_utterances(model, feats, CHUNK, LEFT, ENDPOINTS, progress=seen.append))
    assert [u.endpoint for u in utts] == [True, False]
    assert 200 < utts[1].start < 400 and utts[0].start == 0 and utts[1].end == 600  # the cut is in the silence
    assert sum(seen) == 600
    for utt in utts:  # equal to the piece alone from a fresh state: the caches and the CMN restarted
        torch.testing.assert_close(utt.enc_out, alone(model, feats[utt.start : utt.end]), rtol=1e-5, atol=1e-5)
    # Streamed on from the first sentence, the second utterance's first frames read differently (the first
    # sentence is in their left context): the reset is what makes it fresh.
    with torch.no_grad():
        whole = torch.cat(list(stream_chunks(model.encoder, feats, CHUNK, LEFT)), dim=1)
    second = utts[0].enc_out.size(1)
    assert utts[1].start == 4 * second
    assert not torch.allclose(whole[:, second : second + 4], utts[1].enc_out[:, :4], atol=1e-3)

    def greedy(enc_out, lens, mode):
        return search_encoded(model, enc_out, lens, mode)

    with torch.no_grad():
        tokens, seconds, count = search_utterances(model, feats, ["ctc_greedy", "attention_rescoring"], greedy,
                                                   CHUNK, LEFT, ENDPOINTS, clock=iter(range(100)).__next__)
        pieces = [alone(model, feats[u.start : u.end]) for u in utts]
        expected = [ctc_greedy(model.ctc_log_probs(p), torch.tensor([p.size(1)]), model.blank_id)[0] for p in pieces]
    assert count == 2 and tokens["ctc_greedy"] == expected and all(tokens["ctc_greedy"])
    assert len(tokens["attention_rescoring"]) == 2  # each utterance rescored on its own
    assert seconds["ctc_greedy"] > 0


def test_a_file_without_silence_is_one_utterance_equal_to_the_stream():
    model = hearing_model()
    feats = speech(300, 3)
    with torch.no_grad():
        (utt,) = endpoint_utterances(model, feats, CHUNK, LEFT, ENDPOINTS)
    assert not utt.endpoint and (utt.start, utt.end) == (0, 300)
    torch.testing.assert_close(utt.enc_out, alone(model, feats), rtol=1e-5, atol=1e-5)


def test_pauses_in_the_audio_end_utterances_each_read_as_a_fresh_stream():
    """Speech, 2 s of silence (about 22 dB under it), speech: the pause rule ends the first utterance 0.2 s into the
    silence (every frame up to there encoded, the last chunk flushed) and starts the next one there."""
    model = hearing_model()
    feats = torch.cat([speech(200, 1), SILENCE.expand(200, -1), speech(200, 2)])  # (600, F)
    rule = PauseRule()
    seen = []
    with torch.no_grad():
        utts = list(endpoint_utterances(model, feats, CHUNK, LEFT, None, progress=seen.append, pauses=rule))
    assert [(u.start, u.end, u.endpoint) for u in utts] == [(0, 220, True), (220, 600, False)]
    assert sum(seen) == 600
    for utt in utts:
        torch.testing.assert_close(utt.enc_out, alone(model, feats[utt.start : utt.end]), rtol=1e-5, atol=1e-5)
    with torch.no_grad():  # both rules: whichever ends the utterance first
        both = list(endpoint_utterances(model, feats, CHUNK, LEFT, ENDPOINTS, pauses=rule))
        blank = list(endpoint_utterances(model, feats, CHUNK, LEFT, ENDPOINTS))
    assert len(both) == 2 and both[0].end <= min(blank[0].end, utts[0].end)
    with pytest.raises(ValueError, match="no endpoint rule"):
        next(endpoint_utterances(model, feats, CHUNK, LEFT, None))


def test_the_summary_names_the_rule(monkeypatch):
    model = hearing_model()
    data = long_set()
    monkeypatch.setattr(long_audio, "STREAM_MIN_FRAMES", 80)
    with torch.no_grad():
        heard = evaluate_utterances(model, Letters(), data, ["ctc_greedy"], CHUNK, LEFT, batch_seconds=1.0,
                                    pause_endpoints=PauseRule())
        both = evaluate_utterances(model, Letters(), data, ["ctc_greedy"], CHUNK, LEFT, batch_seconds=1.0,
                                   endpoints=ENDPOINTS, pause_endpoints=PauseRule())
        blank = evaluate_utterances(model, Letters(), data, ["ctc_greedy"], CHUNK, LEFT, batch_seconds=1.0,
                                    endpoints=ENDPOINTS)
    ends = heard.summary()["endpoints"]
    assert ends["rule"] == "pause" and ends["pauses"] == PauseRule().settings() and ends["utterances"] == 2
    record = heard.modes["ctc_greedy"].records[0]
    assert "rules" not in ends and record["endpoint_utterances"] == 2 and record["endpoint_rule"] == "pause"
    assert both.summary()["endpoints"]["rule"] == "both" and "rules" in both.summary()["endpoints"]
    assert blank.summary()["endpoints"]["rule"] == "blank" and "pauses" not in blank.summary()["endpoints"]


def test_memory_holds_one_utterance_and_one_stream_state_however_many():
    """Inputs of 2 and 5 sentences apart: the largest tensor decoding allocates is the same (a sentence's
    frames, one stream state), and each utterance comes out as soon as it ends."""
    model = hearing_model()
    largest = []
    for sentences in (2, 5):
        feats = torch.cat([torch.cat([speech(160, k), SILENCE.expand(160, -1)]) for k in range(sentences)])
        moved = []
        with torch.no_grad(), LargestTensor() as mode:
            for k, utt in enumerate(endpoint_utterances(model, feats, CHUNK, LEFT, ENDPOINTS, progress=moved.append)):
                assert utt.start == sum(moved[:k]) and utt.enc_out.size(1) <= (160 + 160) // 4  # one sentence and pause
        largest.append(mode.largest)
        assert len(moved) == sentences + 1  # and the silence after the last sentence
    assert largest[0] == largest[1], largest


def long_set():
    feats = torch.cat([speech(200, 4), SILENCE.expand(200, -1), speech(240, 5)])
    return EvalSet([Utterance("long", "a b", feats, feats.size(0) * 0.01),
                    Utterance("short", "c", speech(60, 6), 0.6)])


class Letters:
    def decode(self, ids):
        return "".join("abcdefg"[i - 1] for i in ids)


def test_resets_off_decode_as_before_and_on_join_the_utterances(monkeypatch):
    model = hearing_model()
    data = long_set()
    # The long input (159 encoder frames) streams; the short one, in a batch of its own, does not.
    monkeypatch.setattr(long_audio, "STREAM_MIN_FRAMES", 80)
    with torch.no_grad():
        off = evaluate_utterances(model, Letters(), data, ["ctc_greedy"], CHUNK, LEFT, batch_seconds=1.0)
        on = evaluate_utterances(model, Letters(), data, ["ctc_greedy"], CHUNK, LEFT, batch_seconds=1.0,
                                 endpoints=ENDPOINTS)
        feats = data.utterances[0].feats
        before = decode_batch(model, feats[None], torch.tensor([feats.size(0)]), "ctc_greedy", chunk_size=CHUNK,
                              left_chunks=LEFT)
    long_off, short_off = off.modes["ctc_greedy"].records
    assert long_off["hyp"] == Letters().decode(before[0]) and "endpoint_utterances" not in long_off
    assert "endpoints" not in off.summary()
    long_on, short_on = on.modes["ctc_greedy"].records
    with torch.no_grad():
        utts = list(endpoint_utterances(model, feats, CHUNK, LEFT, ENDPOINTS))
        texts = [Letters().decode(search_encoded(model, u.enc_out, torch.tensor([u.enc_out.size(1)]), "ctc_greedy")[0])
                 for u in utts]
    assert len(utts) == 2 and long_on["hyp"] == " ".join(texts) and long_on["endpoint_utterances"] == 2
    assert short_on == short_off  # a short input does not stream: decoded as it was
    assert on.summary()["endpoints"]["utterances"] == 2 and on.summary()["endpoints"]["inputs"] == 1


def test_a_short_input_batched_beside_a_long_one_is_not_decoded_through_endpoints(monkeypatch):
    model = hearing_model()
    data = long_set()
    monkeypatch.setattr(long_audio, "STREAM_MIN_FRAMES", 80)
    with torch.no_grad():
        apart = evaluate_utterances(model, Letters(), data, ["ctc_greedy"], CHUNK, LEFT, batch_seconds=1.0,
                                    endpoints=ENDPOINTS)
        together = evaluate_utterances(model, Letters(), data, ["ctc_greedy"], CHUNK, LEFT, batch_seconds=100.0,
                                       endpoints=ENDPOINTS)  # one batch: the short one padded to the long one
    assert together.modes["ctc_greedy"].records == apart.modes["ctc_greedy"].records
    assert "endpoint_utterances" not in together.modes["ctc_greedy"].records[1]
    assert together.summary()["endpoints"]["inputs"] == 1


def test_bad_settings_are_refused():
    model = hearing_model()
    feats = speech(100, 7)
    for bad, match in [(dict(chunk_size=0), "chunk_size"), (dict(endpoint=EndpointConfig(reset="cache")), "reset"),
                       (dict(endpoint=EndpointConfig(enabled=False, reset="both")), "enabled"),
                       (dict(feats=feats[None]), "one input")]:
        kwargs = {**dict(model=model, feats=feats, chunk_size=CHUNK, left_chunks=LEFT, endpoint=ENDPOINTS), **bad}
        with pytest.raises(ValueError, match=match):
            next(endpoint_utterances(**kwargs))
    offline = AsrModel(build_encoder(pos_enc="rel_xl", input_dim=FEATS, d_model=32, num_heads=2, num_layers=1,
                                     ffn_dim=64, conv_kernel=3, causal=False), 8, 7, decoder_layers=1, decoder_heads=2, decoder_ffn_dim=64).eval()
    with pytest.raises(ValueError, match="causal"):
        next(endpoint_utterances(offline, feats, CHUNK, LEFT, ENDPOINTS))
    for silence in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="trailing_silence_s"):
            file_endpoints(silence)


def test_decode_flags_choose_the_endpoints(capsys):
    base = ["--checkpoint", "x.ckpt", "--chunk-size", "16", "--left-chunks", "4"]
    default = parse_args(base)  # the pause rule
    assert default.endpoints is None and default.pause_endpoints == PauseRule()
    blank = parse_args(base + ["--endpoint-rule", "blank"])
    assert blank.endpoints == file_endpoints() and blank.pause_endpoints is None
    assert parse_args(base + ["--endpoint-rule", "blank", "--endpoint-silence", "0.3"]).endpoints == file_endpoints(0.3)
    for off in (["--no-endpoint-reset"], ["--segment-at-pauses"]):
        assert parse_args(base + off).endpoints is None and parse_args(base + off).pause_endpoints is None
    for bad in (["--no-endpoint-reset", "--endpoint-silence", "0.3"], ["--segment-at-pauses", "--endpoint-silence", "1"],
                ["--endpoint-rule", "blank", "--endpoint-silence", "0"], ["--endpoint-silence", "0.3"]):
        with pytest.raises(SystemExit):
            parse_args(base + bad)
        assert "--endpoint-silence" in capsys.readouterr().err
    heard = parse_args(base + ["--endpoint-rule", "pause", "--endpoint-pause", "0.3"])
    assert heard.endpoints is None and heard.pause_endpoints == PauseRule(min_pause_s=0.3)
    both = parse_args(base + ["--endpoint-rule", "both"])
    assert both.endpoints == file_endpoints() and both.pause_endpoints == PauseRule()
    for bad in (["--endpoint-rule", "blank", "--endpoint-pause", "0.3"], ["--endpoint-pause", "-1"],
                ["--no-endpoint-reset", "--endpoint-rule", "pause"], ["--endpoint-rule", "loud"]):
        with pytest.raises(SystemExit):
            parse_args(base + bad)
        assert "--endpoint-" in capsys.readouterr().err


def test_bench_settings_name_the_endpoint_mode():
    plain, resets, tuned = (parse_setting(n) for n in ("chunk16_left4", "chunk16_left4_endpoints",
                                                        "chunk16_left4_endpoints0.3"))
    assert "--no-endpoint-reset" in plain.decode_args() and "--no-endpoint-reset" not in plain.decode_args(False)
    assert resets.endpoint_silence_s == file_endpoints().rules[1].min_trailing_silence_s
    assert tuned.decode_args()[4:8] == ["--endpoint-rule", "blank", "--endpoint-silence", "0.3"]
    assert tuned.decode_args(knows_rules=False)[4:6] == ["--endpoint-silence", "0.3"]  # an older decode.py
    heard, both = parse_setting("chunk16_left4_pause_endpoints0.2"), parse_setting("chunk16_left4_both_endpoints")
    assert heard.decode_args()[4:8] == ["--endpoint-rule", "pause", "--endpoint-pause", "0.2"]
    assert both.decode_args()[4:6] == ["--endpoint-rule", "both"] and "--endpoint-silence" not in both.decode_args()
    with pytest.raises(ValueError, match="no --endpoint-rule"):
        heard.decode_args(knows_rules=False)
    assert parse_setting("chunk16_left4_pauses").decode_args()[-1] == "--segment-at-pauses"
    for bad in ("full_endpoints", "chunk16_left-1_endpoints", "chunk16_left4_endpoints_pauses", "chunk16",
                "full_pause_endpoints", "chunk16_left4_both_endpoints0.3", "chunk16_left4_pause_endpoints0"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_setting(bad)
