"""Wenet ``final.pt`` tensors -> this toolkit's ``AsrModel`` state dict; every tensor used or named.

Key by key (Wenet name on the left, ours on the right; i a layer):

    encoder.global_cmvn.{mean,istd}                   encoder.cmvn_{mean,istd}
    encoder.embed.conv.{0,2,4}.*                      encoder.subsampling.conv.{0,2,4}.*
    encoder.embed.{out.0,linear}.*                    encoder.subsampling.out.*
    encoder.encoders.i.self_attn.linear_{q,k,v}.*     encoder.blocks.i.attn.in_proj.* (stacked q, k, v)
    encoder.encoders.i.self_attn.linear_out.*         encoder.blocks.i.attn.out_proj.*
    encoder.encoders.i.self_attn.{linear_pos,pos_bias_u,pos_bias_v}   ...attn.scorer.* (wenet_rel)
    encoder.encoders.i.feed_forward_macaron.w_{1,2}.* encoder.blocks.i.ff_in.net.{0,3}.*
    encoder.encoders.i.feed_forward.w_{1,2}.*         encoder.blocks.i.ff_out.net.{0,3}.*
    encoder.encoders.i.conv_module.pointwise_conv1.*  ...conv.pointwise_in.* (kernel-1 Conv1d as Linear)
    encoder.encoders.i.conv_module.depthwise_conv.*   ...conv.depthwise.* (BatchNorm folded in)
    encoder.encoders.i.conv_module.norm.*             ...conv.norm.* (layer norm) or folded (batch norm)
    encoder.encoders.i.conv_module.pointwise_conv2.*  ...conv.pointwise_out.*
    encoder.encoders.i.norm_{ff_macaron,mha,conv,ff,final}.*   ...norm_{ff_in,attn,conv,ff_out,final}.*
    encoder.after_norm.*                              encoder.norm.*
    ctc.ctc_lo.*                                      ctc_proj.*
    decoder[.left_decoder].embed.0.weight             decoder.embed.weight
    decoder[.left_decoder].decoders.i.{self_attn,src_attn}.*   decoder.layers.i.{self_attn,cross_attn}.*
    decoder[.left_decoder].decoders.i.feed_forward.w_{1,2}.*   decoder.layers.i.ffn.{0,3}.*
    decoder[.left_decoder].decoders.i.norm{1,2,3}.*   decoder.layers.i.norm_{self,cross,ffn}.*
    decoder[.left_decoder].{after_norm,output_layer}.*         decoder.{final_norm,output}.*
    decoder.right_decoder.*                           r2l_decoder.* (the same layout)

The sinusoid tables Wenet stores as buffers (``*.pos_enc.pe``, ``decoder*.embed.1.pe``) are
not weights: they are checked against the formula this toolkit computes (float64 angles; Wenet's
float32 ones differ by < 1e-3 over 5000 rows) and then dropped. A bias Wenet's config turned
off is filled with zeros (the same function). Whatever is left unused is an error naming it.
"""

from __future__ import annotations

import torch
from torch import Tensor

from asr.interop.wenet_config import WenetImportError, WenetModelConfig
from asr.model.sinusoid import sinusoid_table

PE_TOLERANCE = 1e-3


class WenetStateDict:
    """The tensors of final.pt, handed out once each; :meth:`unused` is what nobody took."""

    def __init__(self, tensors: dict[str, Tensor], biases: dict[str, bool]) -> None:
        self.tensors, self.biases, self.taken = tensors, biases, set()

    def take(self, key: str) -> Tensor:
        if key not in self.tensors:
            raise WenetImportError(f"final.pt has no tensor {key!r}, which train.yaml's model needs.")
        self.taken.add(key)
        return self.tensors[key]

    def bias(self, key: str, flag: str, size: int) -> Tensor:
        """``key``, or zeros when train.yaml built the layer without a bias (``flag`` False)."""
        if not self.biases.get(flag, True) and key not in self.tensors:
            return torch.zeros(size)
        return self.take(key)

    def linear(self, prefix: str, flag: str) -> tuple[Tensor, Tensor]:
        weight = self.take(f"{prefix}.weight")
        return weight, self.bias(f"{prefix}.bias", flag, weight.size(0))

    def check_table(self, key: str) -> None:
        """A stored sinusoid table (1, N, D): must be the formula's; then it counts as used."""
        if key not in self.tensors:
            return  # older Wenet kept the table out of the state dict
        table = self.take(key).reshape(-1, self.tensors[key].size(-1)).double()  # (N, D)
        expected = sinusoid_table(torch.arange(table.size(0), dtype=torch.float64), table.size(1))
        worst = float((table - expected).abs().max()) if table.numel() else 0.0
        if worst > PE_TOLERANCE:
            raise WenetImportError(f"final.pt: {key} is not the sinusoid table (max difference {worst:.3g}); "
                                   "a learned or other position table cannot be imported.")

    def unused(self) -> list[str]:
        return sorted(set(self.tensors) - self.taken)


def _attention(sd: WenetStateDict, src: str, dst: str, out: dict, flags: tuple[str, str, str]) -> None:
    """linear_{q,k,v} stacked into in_proj, linear_out into out_proj (Wenet ties the out bias to query_bias)."""
    parts = [sd.linear(f"{src}.linear_{name}", flag) for name, flag in zip("qkv", flags)]
    out[f"{dst}.in_proj.weight"] = torch.cat([w for w, _ in parts])  # (3D, D)
    out[f"{dst}.in_proj.bias"] = torch.cat([b for _, b in parts])
    out[f"{dst}.out_proj.weight"], out[f"{dst}.out_proj.bias"] = sd.linear(f"{src}.linear_out", flags[0])


def _copy(sd: WenetStateDict, src: str, dst: str, out: dict, flag: str | None = None) -> None:
    """weight and bias of one layer (a LayerNorm, or a Linear whose bias follows ``flag``)."""
    if flag is None:
        out[f"{dst}.weight"], out[f"{dst}.bias"] = sd.take(f"{src}.weight"), sd.take(f"{src}.bias")
    else:
        out[f"{dst}.weight"], out[f"{dst}.bias"] = sd.linear(src, flag)


def _conv_module(sd: WenetStateDict, src: str, dst: str, out: dict, cfg: WenetModelConfig) -> None:
    w1, b1 = sd.linear(f"{src}.pointwise_conv1", "conv_bias")
    out[f"{dst}.pointwise_in.weight"], out[f"{dst}.pointwise_in.bias"] = w1.squeeze(-1), b1  # (2D, D, 1) -> (2D, D)
    weight, bias = sd.linear(f"{src}.depthwise_conv", "conv_bias")  # (D, 1, k), (D,)
    if cfg.conv_batch_norm:
        # Eval-mode BatchNorm after the depthwise conv is a per-channel affine map: fold it in.
        mean, var = sd.take(f"{src}.norm.running_mean"), sd.take(f"{src}.norm.running_var")
        gamma, beta = sd.take(f"{src}.norm.weight"), sd.take(f"{src}.norm.bias")
        sd.take(f"{src}.norm.num_batches_tracked")  # a training counter: no part of the function
        scale = gamma.double() / torch.sqrt(var.double() + cfg.conv_norm_eps)  # (D,)
        weight = (weight.double() * scale[:, None, None]).to(weight.dtype)
        bias = ((bias.double() - mean.double()) * scale + beta.double()).to(bias.dtype)
    else:
        _copy(sd, f"{src}.norm", f"{dst}.norm", out)
    out[f"{dst}.depthwise.weight"], out[f"{dst}.depthwise.bias"] = weight, bias
    w2, b2 = sd.linear(f"{src}.pointwise_conv2", "conv_bias")
    out[f"{dst}.pointwise_out.weight"], out[f"{dst}.pointwise_out.bias"] = w2.squeeze(-1), b2


def _encoder(sd: WenetStateDict, cfg: WenetModelConfig, out: dict) -> None:
    enc = cfg.model_kwargs["encoder_kwargs"]
    out["encoder.cmvn_mean"] = sd.take("encoder.global_cmvn.mean")
    out["encoder.cmvn_istd"] = sd.take("encoder.global_cmvn.istd")
    convs = {4: (0, 2), 6: (0, 2), 8: (0, 2, 4)}[enc["subsampling"]]
    for i in convs:
        _copy(sd, f"encoder.embed.conv.{i}", f"encoder.subsampling.conv.{i}", out)
    linear = "encoder.embed.out.0" if enc["subsampling"] == 4 else "encoder.embed.linear"
    _copy(sd, linear, "encoder.subsampling.out", out)
    sd.check_table("encoder.embed.pos_enc.pe")
    qkv = ("query_bias", "key_bias", "value_bias")
    for i in range(enc["num_layers"]):
        src, dst = f"encoder.encoders.{i}", f"encoder.blocks.{i}"
        _attention(sd, f"{src}.self_attn", f"{dst}.attn", out, qkv)
        if enc["pos_enc"] == "wenet_rel":
            out[f"{dst}.attn.scorer.linear_pos.weight"] = sd.take(f"{src}.self_attn.linear_pos.weight")
            for name in ("pos_bias_u", "pos_bias_v"):
                out[f"{dst}.attn.scorer.{name}"] = sd.take(f"{src}.self_attn.{name}")
        for wenet, ours in (("feed_forward_macaron", "ff_in"), ("feed_forward", "ff_out")):
            _copy(sd, f"{src}.{wenet}.w_1", f"{dst}.{ours}.net.0", out, "mlp_bias")
            _copy(sd, f"{src}.{wenet}.w_2", f"{dst}.{ours}.net.3", out, "mlp_bias")
        _conv_module(sd, f"{src}.conv_module", f"{dst}.conv", out, cfg)
        for wenet, ours in (("norm_ff_macaron", "norm_ff_in"), ("norm_mha", "norm_attn"), ("norm_conv", "norm_conv"),
                            ("norm_ff", "norm_ff_out"), ("norm_final", "norm_final")):
            _copy(sd, f"{src}.{wenet}", f"{dst}.{ours}", out)
    _copy(sd, "encoder.after_norm", "encoder.norm", out)


def _decoder(sd: WenetStateDict, src: str, dst: str, layers: int, cfg: WenetModelConfig, out: dict) -> None:
    out[f"{dst}.embed.weight"] = sd.take(f"{src}.embed.0.weight")
    sd.check_table(f"{src}.embed.1.pe")
    for i in range(layers):
        s, d = f"{src}.decoders.{i}", f"{dst}.layers.{i}"
        _attention(sd, f"{s}.self_attn", f"{d}.self_attn", out,
                   ("decoder_query_bias", "decoder_key_bias", "decoder_value_bias"))
        _attention(sd, f"{s}.src_attn", f"{d}.cross_attn", out,
                   ("decoder_src_query_bias", "decoder_src_key_bias", "decoder_src_value_bias"))
        _copy(sd, f"{s}.feed_forward.w_1", f"{d}.ffn.0", out, "decoder_mlp_bias")
        _copy(sd, f"{s}.feed_forward.w_2", f"{d}.ffn.3", out, "decoder_mlp_bias")
        for wenet, ours in (("norm1", "norm_self"), ("norm2", "norm_cross"), ("norm3", "norm_ffn")):
            _copy(sd, f"{s}.{wenet}", f"{d}.{ours}", out)
    _copy(sd, f"{src}.after_norm", f"{dst}.final_norm", out)
    if cfg.tie_word_embedding and f"{src}.output_layer.weight" not in sd.tensors:
        out[f"{dst}.output.weight"] = out[f"{dst}.embed.weight"].clone()
        out[f"{dst}.output.bias"] = sd.take(f"{src}.output_layer.bias")
    else:
        _copy(sd, f"{src}.output_layer", f"{dst}.output", out)


def map_state_dict(tensors: dict[str, Tensor], cfg: WenetModelConfig) -> dict[str, Tensor]:
    """Our ``AsrModel`` state dict from Wenet's; ``WenetImportError`` names a missing or unused tensor."""
    sd = WenetStateDict(tensors, cfg.biases)
    out: dict[str, Tensor] = {}
    _encoder(sd, cfg, out)
    _copy(sd, "ctc.ctc_lo", "ctc_proj", out)
    kwargs = cfg.model_kwargs
    if kwargs["r2l_decoder_layers"] > 0:
        _decoder(sd, "decoder.left_decoder", "decoder", kwargs["decoder_layers"], cfg, out)
        _decoder(sd, "decoder.right_decoder", "r2l_decoder", kwargs["r2l_decoder_layers"], cfg, out)
    else:
        _decoder(sd, "decoder", "decoder", kwargs["decoder_layers"], cfg, out)
    unused = sd.unused()
    if unused:
        raise WenetImportError(f"final.pt holds {len(unused)} tensor(s) this model does not use, e.g. {unused[0]!r} "
                               f"(all: {unused[:8]}{' ...' if len(unused) > 8 else ''}); refusing to drop them.")
    return {k: v.detach().clone().contiguous() for k, v in out.items()}
