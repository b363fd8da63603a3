"""AsrModel: target preparation, CTC and attention losses, loss mixing, gradients, padding."""

import pytest
import torch
import torch.nn.functional as F

from asr.model import build_encoder
from asr.model.asr_model import AsrModel, add_sos_eos, build_asr_model, reverse_padded
from asr.model.ctc import label_smoothing_loss

V, SOS = 11, 10
ENC = dict(pos_enc="rel_xl", input_dim=20, d_model=32, num_heads=2, num_layers=1, ffn_dim=64, conv_kernel=3,
           causal=True, subsampling=4, dropout=0.0)


def make_model(seed=0, **kw) -> AsrModel:
    torch.manual_seed(seed)
    args = dict(decoder_layers=1, r2l_decoder_layers=1, decoder_heads=2, decoder_ffn_dim=64, decoder_dropout=0.0,
                ctc_weight=0.3, reverse_weight=0.4, lsm_weight=0.1)
    args.update(kw)
    return AsrModel(build_encoder(**ENC), V, SOS, **args).eval()


def make_batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    feat_lens = torch.tensor([60, 45, 33])
    feats = torch.randn(3, 60, 20, generator=g)
    for b, n in enumerate(feat_lens.tolist()):
        feats[b, n:] = 0.0
    token_lens = torch.tensor([4, 2, 3])
    tokens = torch.randint(1, SOS, (3, 4), generator=g)
    for b, n in enumerate(token_lens.tolist()):
        tokens[b, n:] = -1
    return feats, feat_lens, tokens, token_lens


def test_add_sos_eos_and_reverse_on_a_hand_example():
    tokens = torch.tensor([[3, 4, 5], [6, -1, -1]])
    lens = torch.tensor([3, 1])
    ys_in, ys_out = add_sos_eos(tokens, lens, sos_eos_id=9, ignore_id=-1)
    assert ys_in.tolist() == [[9, 3, 4, 5], [9, 6, 9, 9]]
    assert ys_out.tolist() == [[3, 4, 5, 9], [6, 9, -1, -1]]
    assert reverse_padded(tokens, lens, -1).tolist() == [[5, 4, 3], [6, -1, -1]]


def test_ctc_loss_equals_f_ctc_loss():
    model = make_model()
    feats, feat_lens, tokens, token_lens = make_batch()
    out = model(feats, feat_lens, tokens, token_lens)
    enc, enc_lens = model.encode(feats, feat_lens)
    logp = model.ctc_log_probs(enc)
    ref = F.ctc_loss(logp.transpose(0, 1), tokens.clamp(min=0), enc_lens, token_lens, blank=0, reduction="sum")
    assert torch.allclose(out["loss_ctc"], ref / 3, rtol=1e-5)


def test_label_smoothing_zero_is_cross_entropy_and_positive_matches_kl_oracle():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 7, generator=g, dtype=torch.float64)
    target = torch.randint(0, 7, (2, 5), generator=g)
    target[1, 3:] = -1
    ce = F.cross_entropy(logits.reshape(-1, 7), target.reshape(-1), ignore_index=-1, reduction="sum") / 2
    assert torch.allclose(label_smoothing_loss(logits, target, 0.0).double(), ce, rtol=1e-6)
    s = 0.2
    true_dist = torch.full((2, 5, 7), s / 6, dtype=torch.float64)
    true_dist.scatter_(-1, target.clamp(min=0)[..., None], 1 - s)
    kl = F.kl_div(F.log_softmax(logits, -1), true_dist, reduction="none").sum(-1)  # (2, 5)
    ref = (kl * (target != -1)).sum() / 2
    assert torch.allclose(label_smoothing_loss(logits, target, s).double(), ref, rtol=1e-5)


def test_loss_mixing_of_ctc_l2r_and_r2l():
    model = make_model(ctc_weight=0.3, reverse_weight=0.4)
    feats, feat_lens, tokens, token_lens = make_batch()
    out = model(feats, feat_lens, tokens, token_lens)
    assert set(out) == {"loss", "loss_ctc", "loss_att", "loss_r2l"}
    # Recompute the l2r attention loss by hand from the decoder.
    enc, enc_lens = model.encode(feats, feat_lens)
    ys_in, ys_out = add_sos_eos(tokens, token_lens, SOS, -1)
    l2r = label_smoothing_loss(model.decoder(enc, enc_lens, ys_in, token_lens + 1), ys_out, 0.1)
    assert torch.allclose(out["loss_att"], 0.6 * l2r + 0.4 * out["loss_r2l"], rtol=1e-5)
    assert torch.allclose(out["loss"], 0.3 * out["loss_ctc"] + 0.7 * out["loss_att"], rtol=1e-5)
    assert not torch.allclose(out["loss_r2l"], l2r)


def test_gradients_reach_every_part():
    model = make_model().train()
    out = model(*make_batch())
    out["loss"].backward()
    for name in ("encoder", "ctc_proj", "decoder", "r2l_decoder"):
        grads = [p.grad for p in getattr(model, name).parameters() if p.requires_grad]
        assert any(g is not None and g.abs().sum() > 0 for g in grads), name


def test_loss_does_not_depend_on_batch_padding():
    model = make_model(1)
    feats, feat_lens, tokens, token_lens = make_batch(1)
    batch = model(feats, feat_lens, tokens, token_lens)
    singles = [
        model(feats[b : b + 1, : feat_lens[b]], feat_lens[b : b + 1], tokens[b : b + 1, : token_lens[b]],
              token_lens[b : b + 1])
        for b in range(3)
    ]
    for key in ("loss", "loss_ctc", "loss_att", "loss_r2l"):
        total = sum(s[key] for s in singles)
        assert torch.allclose(batch[key] * 3, total, rtol=1e-4), key


def test_pure_ctc_and_pure_attention():
    batch = make_batch()
    ctc_only = make_model(decoder_layers=0, r2l_decoder_layers=0, reverse_weight=0.0, ctc_weight=1.0)
    out = ctc_only(*batch)
    assert set(out) == {"loss", "loss_ctc"} and torch.equal(out["loss"], out["loss_ctc"])
    att_only = make_model(ctc_weight=0.0, r2l_decoder_layers=0, reverse_weight=0.0)
    out = att_only(*batch)
    assert torch.equal(out["loss"], out["loss_att"])


def test_score_hypotheses_equals_stepwise_attention_log_probs():
    model = make_model(2)
    feats, feat_lens, _, _ = make_batch(2)
    enc, enc_lens = model.encode(feats[:1, :45], feat_lens[1:2])
    hyps = [[3, 1, 4], [], [5]]
    scores = model.score_hypotheses(enc, enc_lens[0], hyps)
    for h, got in zip(hyps, scores.tolist()):
        prefix, total = [SOS], 0.0
        for tok in h + [SOS]:
            logp = model.attention_log_probs(enc, enc_lens, torch.tensor([prefix]))
            total += logp[0, tok].item()
            prefix.append(tok)
        assert got == pytest.approx(total, abs=1e-4)
    # The incremental path gives the same next-token log-probs as the full prefix.
    state = model.init_attention_state(enc, enc_lens[0])
    prefix = torch.tensor([[SOS, 3, 1, 4]])
    for u in range(prefix.shape[1]):
        step_logp, state = model.attention_step(prefix[:, u], state)
        assert torch.allclose(step_logp, model.attention_log_probs(enc, enc_lens, prefix[:, : u + 1]), atol=1e-5)
    # The r2l mix is the weighted sum of the two directions.
    r2l = model.score_hypotheses(enc, enc_lens[0], hyps, reverse_weight=1.0)
    mixed = model.score_hypotheses(enc, enc_lens[0], hyps, reverse_weight=0.25)
    assert torch.allclose(mixed, 0.75 * scores + 0.25 * r2l, atol=1e-5)


def test_hypotheses_share_one_memory_projected_once(monkeypatch):
    model = make_model(2).double()
    feats, feat_lens, _, _ = make_batch(2)
    enc, enc_lens = model.encode(feats[:1, :45].double(), feat_lens[1:2])
    tokens = torch.tensor([[SOS, 3, 1, 4], [SOS, 5, 0, 0], [SOS, 2, 2, 0]])
    token_lens = torch.tensor([4, 2, 3])
    shared = model.decoder(enc, enc_lens, tokens, token_lens)  # (1, T', D) for 3 rows
    copied = model.decoder(enc.expand(3, -1, -1).contiguous(), enc_lens.expand(3), tokens, token_lens)
    torch.testing.assert_close(shared, copied, rtol=0, atol=1e-12)
    # Rescoring an n-best projects the utterance's keys and values once per layer, for one row:
    # N copies of a long utterance's encoder output made its memory grow N-fold.
    rows = []
    for layer in model.decoder.layers:
        project = layer.cross_attn.memory_kv
        monkeypatch.setattr(layer.cross_attn, "memory_kv", lambda m, project=project: rows.append(m.size(0))
                            or project(m))
    model.score_hypotheses(enc, enc_lens[0], [[3, 1, 4], [], [5], [2, 2]])
    assert rows == [1] * len(model.decoder.layers)


def l2r_copy_of_r2l(model: AsrModel) -> AsrModel:
    """The same model whose left-to-right decoder holds the right-to-left decoder's weights."""
    ref = make_model(decoder_layers=1, r2l_decoder_layers=0, reverse_weight=0.0)
    ref.load_state_dict({k: v for k, v in model.state_dict().items() if not k.startswith(("decoder.", "r2l_decoder."))},
                        strict=False)
    ref.decoder.load_state_dict(model.r2l_decoder.state_dict())
    return ref


def test_r2l_scores_equal_hand_reversed_tokens_through_the_l2r_path():
    model = make_model(3)
    ref = l2r_copy_of_r2l(model)
    feats, feat_lens, _, _ = make_batch(3)
    enc, enc_lens = model.encode(feats[:1], feat_lens[:1])
    hyps = [[3, 1, 4, 1], [5, 9], [7], []]
    r2l = model.score_hypotheses(enc, enc_lens[0], hyps, reverse_weight=1.0)
    for h, got in zip(hyps, r2l.tolist()):
        # Reversed by hand and fed one token at a time through the incremental left-to-right path.
        state, total, prev = ref.init_attention_state(enc, enc_lens[0]), 0.0, SOS
        for tok in list(reversed(h)) + [SOS]:
            logp, state = ref.attention_step(torch.tensor([prev]), state)
            total += logp[0, tok].item()
            prev = tok
        assert got == pytest.approx(total, abs=1e-4), h


def test_r2l_loss_equals_l2r_loss_on_hand_reversed_targets():
    model = make_model(4)
    ref = l2r_copy_of_r2l(model)
    feats, feat_lens, tokens, token_lens = make_batch(4)
    reversed_tokens = torch.full_like(tokens, -1)
    for b, n in enumerate(token_lens.tolist()):
        reversed_tokens[b, :n] = torch.tensor(list(reversed(tokens[b, :n].tolist())))
    expected = ref(feats, feat_lens, reversed_tokens, token_lens)["loss_att"]
    torch.testing.assert_close(model(feats, feat_lens, tokens, token_lens)["loss_r2l"], expected)


def test_invalid_arguments_raise_with_values():
    enc = build_encoder(**ENC)
    with pytest.raises(ValueError, match=r"ctc_weight \(1.5\)"):
        AsrModel(enc, V, SOS, ctc_weight=1.5)
    with pytest.raises(ValueError, match=r"reverse_weight \(0.3\).*r2l_decoder_layers \(0\)"):
        AsrModel(enc, V, SOS, reverse_weight=0.3)
    with pytest.raises(ValueError, match=r"ctc_weight \(0.5\) < 1.*decoder_layers is 0"):
        AsrModel(enc, V, SOS, decoder_layers=0, ctc_weight=0.5)
    with pytest.raises(ValueError, match=r"blank_id \(10\)"):
        AsrModel(enc, V, SOS, blank_id=10)


def test_build_asr_model_builds_the_encoder():
    model = build_asr_model(vocab_size=V, sos_eos_id=SOS, encoder_kwargs=ENC, decoder_layers=1, decoder_ffn_dim=64)
    assert model.encoder.output_size == 32 and model.decoder is not None and model.r2l_decoder is None
