"""Attention decoder: causality, padding invariance, incremental steps, old checkpoints."""

import math

import pytest
import torch
import torch.nn.functional as F

from asr.model.decoder import TransformerDecoder

V, D = 9, 32


def make_decoder(seed: int = 0) -> TransformerDecoder:
    torch.manual_seed(seed)
    return TransformerDecoder(V, D, num_heads=4, ffn_dim=64, num_layers=2, dropout=0.0).eval()


def test_causal_changing_a_later_token_leaves_earlier_outputs():
    dec = make_decoder()
    memory = torch.randn(1, 7, D)
    lens = torch.tensor([7])
    tokens = torch.tensor([[8, 1, 2, 3, 4, 5]])
    changed = tokens.clone()
    changed[0, 3] = 6
    a, b = dec(memory, lens, tokens), dec(memory, lens, changed)  # (1, U, V)
    assert torch.allclose(a[:, :3], b[:, :3], atol=1e-6)
    assert not torch.allclose(a[:, 3:], b[:, 3:], atol=1e-4)


def test_memory_padding_is_ignored():
    dec = make_decoder(1)
    memory = torch.randn(1, 5, D)
    tokens = torch.tensor([[8, 3, 2]])
    padded = torch.cat([memory, 100 * torch.randn(1, 4, D)], dim=1)
    a = dec(memory, torch.tensor([5]), tokens)
    b = dec(padded, torch.tensor([5]), tokens)
    assert torch.allclose(a, b, atol=1e-5)


def test_token_padding_is_ignored_in_a_batch():
    dec = make_decoder(2)
    memory = torch.randn(2, 6, D)
    mem_lens = torch.tensor([6, 4])
    short = torch.tensor([[8, 5, 1]])
    long = torch.tensor([[8, 2, 3, 4, 7]])
    batch = torch.tensor([[8, 5, 1, 8, 8], [8, 2, 3, 4, 7]])
    out = dec(memory, mem_lens, batch, torch.tensor([3, 5]))  # (2, 5, V)
    alone0 = dec(memory[:1], mem_lens[:1], short)
    alone1 = dec(memory[1:, :4], mem_lens[1:], long)
    assert torch.allclose(out[0, :3], alone0[0], atol=1e-5)
    assert torch.allclose(out[1], alone1[0], atol=1e-5)


def test_zero_length_memory_stays_finite():
    dec = make_decoder(3)
    out = dec(torch.randn(2, 4, D), torch.tensor([4, 0]), torch.tensor([[8, 1], [8, 2]]))
    assert torch.isfinite(out).all()


def test_bad_arguments_raise_with_values():
    with pytest.raises(ValueError, match=r"d_model \(30\).*num_heads \(4\)"):
        TransformerDecoder(V, 30, num_heads=4)
    with pytest.raises(ValueError, match=r"num_layers \(0\)"):
        TransformerDecoder(V, D, num_layers=0)


def test_incremental_steps_equal_the_full_forward_with_beam_reordering():
    dec = make_decoder(4)
    memory = torch.randn(1, 6, D)
    mem_lens = torch.tensor([5])  # frame 5 is padding and must stay ignored
    g = torch.Generator().manual_seed(0)
    prefixes = torch.cat([torch.full((3, 1), 8), torch.randint(0, V, (3, 5), generator=g)], dim=1)  # (3, 6)
    state = dec.init_state(memory, mem_lens)
    rows = torch.arange(3)
    for u in range(prefixes.shape[1]):
        if u == 3:
            # Reorder as a beam search would: rows now follow hypotheses 2, 0, 0.
            order = torch.tensor([2, 0, 0])
            state, rows, prefixes = state.select(order), rows[order], prefixes[order]
        logits, state = dec.step(prefixes[:, u], state)  # (3, V)
        full = dec(memory.expand(3, -1, -1), mem_lens.expand(3), prefixes[:, : u + 1])[:, -1]
        assert torch.allclose(logits, full, atol=1e-5), u
    assert state.length == 6


def test_step_refuses_training_mode():
    dec = make_decoder().train()
    with pytest.raises(ValueError, match="eval"):
        dec.step(torch.tensor([8]), dec.init_state(torch.randn(1, 3, D), torch.tensor([3])))


def to_old_layout(state: dict) -> dict:
    """The state dict as decoders wrote it before they shared the encoder's
    MultiHeadAttention: separate w_q, w_k, w_v and w_out linears per attention."""
    old = {}
    for key, value in state.items():
        if ".in_proj." in key:
            prefix, kind = key.split("in_proj.")
            for name, part in zip("qkv", value.chunk(3)):
                old[f"{prefix}w_{name}.{kind}"] = part.clone()
        else:
            old[key.replace(".out_proj.", ".w_out.")] = value.clone()
    return old


def test_old_layout_checkpoint_loads_with_identical_outputs():
    dec = make_decoder(5)
    old = to_old_layout(dec.state_dict())
    assert "layers.1.cross_attn.w_v.bias" in old and not any("in_proj" in key for key in old)
    fresh = make_decoder(6)
    fresh.load_state_dict(old)  # strict: every old key is used, none missing
    # Fewer memory frames (2) than tokens (3): cross-attention keys need not outnumber queries.
    memory, lens, tokens = torch.randn(2, 2, D), torch.tensor([2, 1]), torch.tensor([[8, 1, 2], [8, 3, 3]])
    assert torch.equal(fresh(memory, lens, tokens), dec(memory, lens, tokens))
    # The old names meant q = x w_q, k = m w_k, v = m w_v, heads merged through w_out.
    attn = fresh.layers[0].cross_attn
    w = {n: (old[f"layers.0.cross_attn.w_{n}.weight"], old[f"layers.0.cross_attn.w_{n}.bias"]) for n in ("q", "k", "v", "out")}
    x, m = torch.randn(2, 3, D), torch.randn(2, 5, D)

    def heads(t):
        return t.view(2, -1, 4, D // 4).transpose(1, 2)  # (B, H, L, Dh)

    q, k, v = heads(F.linear(x, *w["q"])), heads(F.linear(m, *w["k"])), heads(F.linear(m, *w["v"]))
    mixed = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(D // 4), dim=-1) @ v  # (B, H, 3, Dh)
    expected = F.linear(mixed.transpose(1, 2).reshape(2, 3, D), *w["out"])
    torch.testing.assert_close(attn.cross(x, attn.memory_kv(m), None), expected)
