"""Translation probe: relative schemes give identical output at every stream offset; absolute ones do not."""

from __future__ import annotations

import pytest
import torch

from asr.ablation.translation import OFFSETS_S, lead_in_features, shifted_log_probs, translation_probe
from asr.data.tokenizer import load_tokenizer, write_char_units
from asr.evaluation.split import Utterance
from asr.model import POSITION_SCHEMES
from asr.model.asr_model import build_asr_model
from asr.model.positions import build_position_scheme

torch.set_num_threads(1)
N_MELS = 80
FRAMES_PER_SECOND = 25  # encoder frames at 40 ms


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return load_tokenizer(write_char_units(["abc de fgh"], tmp_path_factory.mktemp("tok")))


def model_for(tokenizer, pos_enc, online_cmn=0.0):
    torch.manual_seed(0)
    options = {"max_len": 20000} if pos_enc == "abs_learned" else {}
    model = build_asr_model(
        vocab_size=tokenizer.vocab_size, sos_eos_id=tokenizer.sos_eos_id,
        encoder_kwargs=dict(pos_enc=pos_enc, input_dim=N_MELS, d_model=32, num_heads=2, num_layers=2, ffn_dim=64,
                            conv_kernel=5, online_cmn_frames=online_cmn, **options),
        decoder_layers=1, decoder_heads=2, decoder_ffn_dim=64,
    )
    lead = lead_in_features()
    model.encoder.set_cmvn(lead.mean(0) + 3.0, torch.full((N_MELS,), 0.3))
    return model.eval()


def utterances(n=3):
    g = torch.Generator().manual_seed(1)
    return [torch.randn(70 + 37 * i, N_MELS, generator=g) * 2 + 12 for i in range(n)]


def test_lead_in_is_fixed_quiet_noise_of_whole_chunks():
    lead = lead_in_features()
    assert lead.shape == (256, N_MELS) and torch.equal(lead, lead_in_features())
    assert 5.0 < float(lead.mean()) < 12.0  # quiet, but not the log(eps) = -15.9 floor of digital zeros


@pytest.mark.parametrize("pos_enc", POSITION_SCHEMES)
def test_relative_schemes_give_identical_output_at_every_offset(tokenizer, pos_enc):
    model = model_for(tokenizer, pos_enc)
    feats, lead = utterances(), lead_in_features()
    outs = {s: shifted_log_probs(model, feats, s * FRAMES_PER_SECOND, lead) for s in OFFSETS_S}
    translation_invariant = build_position_scheme(pos_enc, 32, 2).is_relative or pos_enc == "none"
    for s in OFFSETS_S[1:]:
        same = all(torch.equal(a, b) for a, b in zip(outs[0], outs[s]))
        if translation_invariant:
            assert same, f"{pos_enc} at {s} s"
        else:  # abs_sin, abs_learned and wenet_rel read the clock
            assert max(float((a - b).abs().max()) for a, b in zip(outs[0], outs[s])) > 1e-3, f"{pos_enc} at {s} s"


def test_batched_streams_equal_one_at_a_time_and_skip_the_lead_in(tokenizer):
    model = model_for(tokenizer, "wenet_rel", online_cmn=100.0)
    feats, lead = utterances(), lead_in_features()
    batched = shifted_log_probs(model, feats, 1500, lead)
    for f, out in zip(feats, batched):
        (alone,) = shifted_log_probs(model, [f], 1500, lead, batch_size=1)
        torch.testing.assert_close(out, alone)
        assert out.size(0) == model.encoder.output_length(f.size(0))
        # What a stream started at that clock gives after the lead-in (its first 64 encoder frames),
        # its frontend normalizing frame by frame.
        state = model.encoder.init_state(1, 16, 4, start_time=1500)
        frontend = model.encoder.online_cmn().stream()
        stream = torch.cat([lead, f])[None]
        with torch.no_grad():
            pieces = [model.encoder.stream_step(frontend.push(stream[:, i : i + 50]), state,
                                                final=i + 50 >= stream.size(1))[0] for i in range(0, stream.size(1), 50)]
        torch.testing.assert_close(out, model.ctc_log_probs(torch.cat(pieces, 1))[0, 64:], rtol=1e-5, atol=1e-5)


def test_probe_scores_every_utterance(tokenizer):
    model = model_for(tokenizer, "rel_xl")
    utts = [Utterance(f"u{i}", "abc de", f, f.size(0) / 100) for i, f in enumerate(utterances())]
    result = translation_probe(model, tokenizer, utts, 600)
    assert [r["key"] for r in result.records] == ["u0", "u1", "u2"]
    assert all(r["ref_words"] == 2 for r in result.records)
    assert result.totals["start_time"] == 15000 and result.totals["utterances"] == 3
    with pytest.raises(ValueError, match="whole number"):
        shifted_log_probs(model, utterances(1), 0, lead_in_features()[:100])
