"""A small random model in Wenet's released layout, and Wenet's forward written from its formulas.

Written from reading Wenet's code (wenet/models/transformer/*.py): the state dict key names and
shapes of ``final.pt``, ``train.yaml``'s sections, ``global_cmvn`` in its JSON and Kaldi text
forms, ``units.txt`` and a ``bpe.model``. Nothing here imports Wenet: the functions below are an
independent float64 statement of what a Wenet Conformer U2++ computes, so the importer's output
can be checked against them (the check against Wenet's own code is ``scripts/check_wenet_import.py``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F
import yaml

F_IN = 20  # mel bins
UNITS = ["<blank>", "<unk>", "\u2581", "a", "b", "c", "d", "e", "<sos/eos>"]


def _sinusoid(positions: torch.Tensor, dim: int) -> torch.Tensor:
    """PE(t, 2m) = sin(t / 10000^(2m/dim)), PE(t, 2m+1) = cos(...), written out again (float64)."""
    m = torch.arange(0, dim, 2, dtype=torch.float64)
    angle = positions.double()[:, None] / torch.pow(10000.0, m / dim)[None]
    out = torch.zeros(len(positions), dim, dtype=torch.float64)
    out[:, 0::2], out[:, 1::2] = angle.sin(), angle.cos()
    return out


def config(d_model=16, heads=2, layers=2, ffn=32, kernel=5, causal=True, norm="batch_norm", pos="rel_pos",
           decoder="bitransformer", dec_layers=1, r_layers=1, input_layer="conv2d", vocab=len(UNITS),
           tokenizer="char", cmvn_json=True) -> dict:
    """train.yaml as a released U2++ model has it (the model sections and the fbank options)."""
    attn = {"rel_pos": "rel_selfattn", "abs_pos": "selfattn"}[pos]
    return {
        "input_dim": F_IN, "output_dim": vocab, "encoder": "conformer", "decoder": decoder,
        "cmvn": "global_cmvn", "cmvn_conf": {"cmvn_file": "/train/exp/u2pp/global_cmvn", "is_json_cmvn": cmvn_json},
        "tokenizer": tokenizer,
        "tokenizer_conf": {"symbol_table_path": "/train/data/dict/units.txt", "split_with_space": False,
                           **({"bpe_path": "/train/data/bpe.model"} if tokenizer == "bpe" else {}),
                           "special_tokens": {"<blank>": 0, "<unk>": 1, "<sos>": vocab - 1, "<eos>": vocab - 1}},
        "encoder_conf": {"output_size": d_model, "attention_heads": heads, "linear_units": ffn, "num_blocks": layers,
                         "dropout_rate": 0.1, "positional_dropout_rate": 0.1, "attention_dropout_rate": 0.1,
                         "input_layer": input_layer, "normalize_before": True, "cnn_module_kernel": kernel,
                         "use_cnn_module": True, "activation_type": "swish", "pos_enc_layer_type": pos,
                         "selfattention_layer_type": attn, "causal": causal, "use_dynamic_chunk": True,
                         "cnn_module_norm": norm, "use_dynamic_left_chunk": False},
        "decoder_conf": {"attention_heads": heads, "linear_units": ffn, "num_blocks": dec_layers,
                         **({"r_num_blocks": r_layers} if decoder == "bitransformer" else {}),
                         "dropout_rate": 0.1, "positional_dropout_rate": 0.1, "self_attention_dropout_rate": 0.1,
                         "src_attention_dropout_rate": 0.1},
        "model_conf": {"ctc_weight": 0.3, "lsm_weight": 0.1, "length_normalized_loss": False,
                       "reverse_weight": 0.3 if decoder == "bitransformer" else 0.0},
        "ctc_conf": {"ctc_blank_id": 0},
        "dataset_conf": {"fbank_conf": {"num_mel_bins": F_IN, "frame_shift": 10, "frame_length": 25, "dither": 1.0},
                         "resample_conf": {"resample_rate": 16000}, "batch_conf": {"batch_type": "dynamic"}},
        "grad_clip": 5, "accum_grad": 1, "max_epoch": 120, "optim": "adam",
    }


def state_dict(cfg: dict, seed: int = 0, with_pe: bool = True) -> dict[str, torch.Tensor]:
    """Random tensors under Wenet's key names and shapes for ``cfg`` (float32, as final.pt holds them)."""
    g = torch.Generator().manual_seed(seed)
    enc, dec = cfg["encoder_conf"], cfg["decoder_conf"]
    d, ffn, k, v = enc["output_size"], enc["linear_units"], enc["cnn_module_kernel"], cfg["output_dim"]
    sd: dict[str, torch.Tensor] = {}

    def rand(name, *shape, scale=None):
        fan_in = shape[-1] if len(shape) > 1 else 1
        sd[name] = torch.randn(*shape, generator=g) * (scale if scale is not None else fan_in**-0.5)

    def linear(name, out_dim, in_dim):
        rand(f"{name}.weight", out_dim, in_dim)
        rand(f"{name}.bias", out_dim, scale=0.1)

    def norm(name, dim):
        sd[f"{name}.weight"] = 1.0 + 0.1 * torch.randn(dim, generator=g)
        sd[f"{name}.bias"] = 0.1 * torch.randn(dim, generator=g)

    sd["encoder.global_cmvn.mean"] = torch.randn(F_IN, generator=g)
    sd["encoder.global_cmvn.istd"] = torch.rand(F_IN, generator=g) + 0.5
    rates = {"conv2d": ((3, 2), (3, 2)), "conv2d6": ((3, 2), (5, 3)), "conv2d8": ((3, 2), (3, 2), (3, 2))}
    freq, channels = F_IN, 1
    for i, (kern, stride) in enumerate(rates[enc["input_layer"]]):
        rand(f"encoder.embed.conv.{2 * i}.weight", d, channels, kern, kern, scale=(channels * kern * kern) ** -0.5)
        rand(f"encoder.embed.conv.{2 * i}.bias", d, scale=0.1)
        freq, channels = (freq - kern) // stride + 1, d
    linear("encoder.embed.out.0" if enc["input_layer"] == "conv2d" else "encoder.embed.linear", d, d * freq)
    if with_pe:  # a registered buffer in today's Wenet: float32 angles over 5000 rows
        sd["encoder.embed.pos_enc.pe"] = _sinusoid(torch.arange(5000), d).float()[None]
    heads = enc["attention_heads"]
    for i in range(enc["num_blocks"]):
        p = f"encoder.encoders.{i}"
        for name in ("q", "k", "v", "out"):
            linear(f"{p}.self_attn.linear_{name}", d, d)
        if enc["pos_enc_layer_type"] == "rel_pos":
            rand(f"{p}.self_attn.linear_pos.weight", d, d)
            rand(f"{p}.self_attn.pos_bias_u", heads, d // heads, scale=0.3)
            rand(f"{p}.self_attn.pos_bias_v", heads, d // heads, scale=0.3)
        for ff in ("feed_forward", "feed_forward_macaron"):
            linear(f"{p}.{ff}.w_1", ffn, d)
            linear(f"{p}.{ff}.w_2", d, ffn)
        c = f"{p}.conv_module"
        rand(f"{c}.pointwise_conv1.weight", 2 * d, d, 1, scale=d**-0.5)
        rand(f"{c}.pointwise_conv1.bias", 2 * d, scale=0.3)
        rand(f"{c}.depthwise_conv.weight", d, 1, k, scale=k**-0.5)
        rand(f"{c}.depthwise_conv.bias", d, scale=0.1)
        norm(f"{c}.norm", d)
        if enc["cnn_module_norm"] == "batch_norm":
            sd[f"{c}.norm.running_mean"] = 0.2 * torch.randn(d, generator=g)
            sd[f"{c}.norm.running_var"] = torch.rand(d, generator=g) + 0.5
            sd[f"{c}.norm.num_batches_tracked"] = torch.tensor(1000)
        rand(f"{c}.pointwise_conv2.weight", d, d, 1, scale=d**-0.5)
        rand(f"{c}.pointwise_conv2.bias", d, scale=0.1)
        for n in ("norm_ff", "norm_mha", "norm_ff_macaron", "norm_conv", "norm_final"):
            norm(f"{p}.{n}", d)
    norm("encoder.after_norm", d)
    linear("ctc.ctc_lo", v, d)
    prefixes = ({"decoder.left_decoder": dec["num_blocks"], "decoder.right_decoder": dec["r_num_blocks"]}
                if cfg["decoder"] == "bitransformer" else {"decoder": dec["num_blocks"]})
    for prefix, layers in prefixes.items():
        rand(f"{prefix}.embed.0.weight", v, d, scale=0.3)
        if with_pe:
            sd[f"{prefix}.embed.1.pe"] = _sinusoid(torch.arange(5000), d).float()[None]
        for i in range(layers):
            p = f"{prefix}.decoders.{i}"
            for att in ("self_attn", "src_attn"):
                for name in ("q", "k", "v", "out"):
                    linear(f"{p}.{att}.linear_{name}", d, d)
            linear(f"{p}.feed_forward.w_1", ffn, d)
            linear(f"{p}.feed_forward.w_2", d, ffn)
            for n in ("norm1", "norm2", "norm3"):
                norm(f"{p}.{n}", d)
        norm(f"{prefix}.after_norm", d)
        linear(f"{prefix}.output_layer", v, d)
    return sd


def write_cmvn(path: Path, mean: torch.Tensor, istd: torch.Tensor, as_json: bool, frames: int = 1000) -> None:
    """Stats whose Wenet CMVN is (mean, istd): sums = mean * n, squares = (1/istd^2 + mean^2) * n."""
    sums = (mean.double() * frames).tolist()
    squares = ((1.0 / istd.double() ** 2 + mean.double() ** 2) * frames).tolist()
    if as_json:
        path.write_text(json.dumps({"mean_stat": sums, "var_stat": squares, "frame_num": frames}))
    else:  # compute-cmvn-stats --binary=false
        first = " ".join(repr(x) for x in sums) + f" {frames}"
        path.write_text(f" [\n  {first}\n  {' '.join(repr(x) for x in squares)} 0 ]\n")


def write_folder(folder: Path, cfg: dict, sd: dict, units=UNITS, cmvn_json=True, bpe_model: Path | None = None) -> Path:
    """A released-model folder: final.pt, train.yaml, global_cmvn, units.txt (+ bpe.model)."""
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(sd, folder / "final.pt")
    (folder / "train.yaml").write_text(yaml.safe_dump(cfg))
    write_cmvn(folder / "global_cmvn", sd["encoder.global_cmvn.mean"], sd["encoder.global_cmvn.istd"], cmvn_json)
    (folder / "units.txt").write_text("".join(f"{u} {i}\n" for i, u in enumerate(units)), encoding="utf-8")
    if bpe_model is not None:
        (folder / "bpe.model").write_bytes(bpe_model.read_bytes())
    return folder


# ---------------------------------------------------------------- Wenet's forward, from its formulas

def _ln(sd, name, x):
    return F.layer_norm(x, x.shape[-1:], sd[f"{name}.weight"].double(), sd[f"{name}.bias"].double(), 1e-5)


def _lin(sd, name, x):
    return F.linear(x, sd[f"{name}.weight"].double(), sd[f"{name}.bias"].double())


def _mha(sd, name, q_in, kv_in, heads, mask, pos=None):
    """Wenet's MultiHeadedAttention; with ``pos`` (K, D) its rel_pos variant (no rel_shift)."""
    b, c, d = q_in.shape
    dk = d // heads
    q = _lin(sd, f"{name}.linear_q", q_in).view(b, c, heads, dk)  # (B, C, H, Dk)
    k = _lin(sd, f"{name}.linear_k", kv_in).view(b, -1, heads, dk).transpose(1, 2)  # (B, H, K, Dk)
    v = _lin(sd, f"{name}.linear_v", kv_in).view(b, -1, heads, dk).transpose(1, 2)
    if pos is None:
        scores = q.transpose(1, 2) @ k.transpose(-2, -1) / math.sqrt(dk)
    else:
        p = F.linear(pos, sd[f"{name}.linear_pos.weight"].double()).view(-1, heads, dk).transpose(0, 1)  # (H, K, Dk)
        ac = (q + sd[f"{name}.pos_bias_u"].double()).transpose(1, 2) @ k.transpose(-2, -1)
        bd = (q + sd[f"{name}.pos_bias_v"].double()).transpose(1, 2) @ p.transpose(-2, -1)
        scores = (ac + bd) / math.sqrt(dk)
    scores = scores.masked_fill(~mask[:, None], float("-inf"))
    attn = torch.softmax(scores, -1).masked_fill(~mask[:, None], 0.0)
    return _lin(sd, f"{name}.linear_out", (attn @ v).transpose(1, 2).reshape(b, c, d))


def _conv_module(sd, name, x, kernel, causal, batch_norm):
    h = x.transpose(1, 2)  # (B, D, T)
    if causal:
        h = F.pad(h, (kernel - 1, 0))  # zeros at the module's input
    h = F.conv1d(h, sd[f"{name}.pointwise_conv1.weight"].double(), sd[f"{name}.pointwise_conv1.bias"].double())
    h = F.glu(h, dim=1)
    h = F.conv1d(h, sd[f"{name}.depthwise_conv.weight"].double(), sd[f"{name}.depthwise_conv.bias"].double(),
                 padding=0 if causal else (kernel - 1) // 2, groups=h.size(1))
    if batch_norm:
        h = F.batch_norm(h, sd[f"{name}.norm.running_mean"].double(), sd[f"{name}.norm.running_var"].double(),
                         sd[f"{name}.norm.weight"].double(), sd[f"{name}.norm.bias"].double(), False, 0.0, 1e-5)
    else:
        h = _ln(sd, f"{name}.norm", h.transpose(1, 2)).transpose(1, 2)
    h = F.silu(h)
    h = F.conv1d(h, sd[f"{name}.pointwise_conv2.weight"].double(), sd[f"{name}.pointwise_conv2.bias"].double())
    return h.transpose(1, 2)


def chunk_mask(size: int, chunk: int, left: int) -> torch.Tensor:
    """Wenet's subsequent_chunk_mask, row by row."""
    mask = torch.zeros(size, size, dtype=torch.bool)
    for i in range(size):
        start = 0 if left < 0 else max((i // chunk - left) * chunk, 0)
        mask[i, start : min((i // chunk + 1) * chunk, size)] = True
    return mask


def encoder_forward(sd, cfg, feats, chunk=0, left=-1):
    """Wenet's ConformerEncoder.forward on one utterance feats (1, T, F): (1, T', D) float64."""
    enc = cfg["encoder_conf"]
    x = (feats.double() - sd["encoder.global_cmvn.mean"].double()) * sd["encoder.global_cmvn.istd"].double()
    h = x[:, None]  # (1, 1, T, F)
    rates = {"conv2d": ((3, 2), (3, 2)), "conv2d6": ((3, 2), (5, 3)), "conv2d8": ((3, 2), (3, 2), (3, 2))}
    for i, (_, stride) in enumerate(rates[enc["input_layer"]]):
        h = F.relu(F.conv2d(h, sd[f"encoder.embed.conv.{2 * i}.weight"].double(),
                            sd[f"encoder.embed.conv.{2 * i}.bias"].double(), stride=stride))
    b, ch, t, f = h.shape
    out = "encoder.embed.out.0" if enc["input_layer"] == "conv2d" else "encoder.embed.linear"
    d = enc["output_size"]
    x = _lin(sd, out, h.transpose(1, 2).reshape(b, t, ch * f)) * math.sqrt(d)
    pe = _sinusoid(torch.arange(t), d)
    rel = enc["pos_enc_layer_type"] == "rel_pos"
    if not rel:
        x = x + pe
    mask = (chunk_mask(t, chunk, left) if chunk > 0 else torch.ones(t, t, dtype=torch.bool))[None]
    for i in range(enc["num_blocks"]):
        p = f"encoder.encoders.{i}"
        x = x + 0.5 * _lin(sd, f"{p}.feed_forward_macaron.w_2",
                           F.silu(_lin(sd, f"{p}.feed_forward_macaron.w_1", _ln(sd, f"{p}.norm_ff_macaron", x))))
        y = _ln(sd, f"{p}.norm_mha", x)
        x = x + _mha(sd, f"{p}.self_attn", y, y, enc["attention_heads"], mask, pe if rel else None)
        x = x + _conv_module(sd, f"{p}.conv_module", _ln(sd, f"{p}.norm_conv", x), enc["cnn_module_kernel"],
                             enc["causal"], enc["cnn_module_norm"] == "batch_norm")
        x = x + 0.5 * _lin(sd, f"{p}.feed_forward.w_2",
                           F.silu(_lin(sd, f"{p}.feed_forward.w_1", _ln(sd, f"{p}.norm_ff", x))))
        x = _ln(sd, f"{p}.norm_final", x)
    return _ln(sd, "encoder.after_norm", x)


def ctc_log_probs(sd, enc_out):
    return torch.log_softmax(_lin(sd, "ctc.ctc_lo", enc_out), -1)


def decoder_score(sd, cfg, prefix, enc_out, hyp):
    """Wenet's attention-rescoring score of one hypothesis from decoder ``prefix``: sum of log p(y_j), then <eos>."""
    d, heads = cfg["encoder_conf"]["output_size"], cfg["decoder_conf"]["attention_heads"]
    layers = cfg["decoder_conf"]["r_num_blocks" if prefix.endswith("right_decoder") else "num_blocks"]
    eos = cfg["output_dim"] - 1
    ys = torch.tensor([[eos] + list(hyp)])  # <sos> = <eos> id
    u = ys.size(1)
    x = F.embedding(ys, sd[f"{prefix}.embed.0.weight"].double()) * math.sqrt(d) + _sinusoid(torch.arange(u), d)
    causal = torch.ones(u, u, dtype=torch.bool).tril()[None]
    memory_mask = torch.ones(1, 1, enc_out.size(1), dtype=torch.bool)
    for i in range(layers):
        p = f"{prefix}.decoders.{i}"
        y = _ln(sd, f"{p}.norm1", x)
        x = x + _mha(sd, f"{p}.self_attn", y, y, heads, causal)
        x = x + _mha(sd, f"{p}.src_attn", _ln(sd, f"{p}.norm2", x), enc_out, heads, memory_mask)
        x = x + _lin(sd, f"{p}.feed_forward.w_2", F.relu(_lin(sd, f"{p}.feed_forward.w_1", _ln(sd, f"{p}.norm3", x))))
    logp = torch.log_softmax(_lin(sd, f"{prefix}.output_layer", _ln(sd, f"{prefix}.after_norm", x)), -1)[0]
    targets = list(hyp) + [eos]
    return float(sum(logp[j, w] for j, w in enumerate(targets)))
