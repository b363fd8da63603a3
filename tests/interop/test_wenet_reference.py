"""The imported model against Wenet's OWN code (skipped unless WENET_SRC names a Wenet checkout).

CI has no Wenet (it is not on PyPI); run it locally with a checkout of github.com/wenet-e2e/wenet:

    WENET_SRC=/path/to/wenet python -m pytest -s tests/interop/test_wenet_reference.py

It builds a random model in Wenet's released layout, loads it with Wenet's ``init_model`` and
with this toolkit's importer, and compares in float32: encoder output and CTC log-probs (full
context and with a chunk mask), attention-rescoring scores of the left-to-right and
right-to-left decoders, and streaming (``stream_step`` against Wenet's
``forward_chunk_by_chunk``). ``-s`` prints the largest differences.

Loading Wenet's modules needs three shims (``asr.bench.peers.import_wenet_source``, shared with the
peers benchmark), none of which touches its math: ``wenet/__init__.py``
is skipped (it pulls librosa through the CLI), ``whisper.tokenizer.LANGUAGES`` is stubbed
(``wenet.utils.common`` imports it), and ``torch.nn.modules.conv.Union`` is restored (one
Wenet module imports ``Union`` from there; torch 2.11 no longer has it).
"""

from __future__ import annotations

import os
import types
from pathlib import Path

import pytest
import torch
import yaml

from asr.bench.peers import import_wenet_source
from asr.interop.wenet import import_wenet, write_checkpoint
from asr.train.checkpoint import load_model
from tests.interop import wenet_layout as wl

WENET_SRC = os.environ.get("WENET_SRC")
pytestmark = pytest.mark.skipif(
    not WENET_SRC or not (Path(WENET_SRC) / "wenet" / "models" / "transformer" / "encoder.py").is_file(),
    reason="set WENET_SRC to a Wenet checkout to compare with Wenet's own code",
)
TOL = 1e-4


def wenet_init_model():
    import_wenet_source(Path(WENET_SRC))
    from wenet.utils.init_model import init_model

    return init_model


def report(name: str, got: torch.Tensor, want: torch.Tensor) -> float:
    diff = float((got.float() - want.float()).abs().max())
    print(f"{name:<40} max |ours - wenet| = {diff:.2e}")
    assert diff < TOL, f"{name}: {diff}"
    return diff


@pytest.mark.parametrize("variant", [
    {"d_model": 64, "heads": 4, "layers": 4, "ffn": 128, "kernel": 15},  # U2++: causal, batch norm, rel_pos
    {"d_model": 64, "heads": 4, "layers": 3, "ffn": 128, "kernel": 15, "norm": "layer_norm", "causal": False,
     "pos": "abs_pos", "decoder": "transformer", "input_layer": "conv2d6"},
    {"d_model": 64, "heads": 4, "layers": 3, "ffn": 128, "kernel": 7, "norm": "layer_norm", "input_layer": "conv2d8"},
], ids=["u2pp_causal_bn_rel", "noncausal_abs_conv2d6", "causal_ln_conv2d8"])
def test_equals_wenet(tmp_path, variant):
    cfg = wl.config(dec_layers=2, r_layers=2, **variant)
    sd = wl.state_dict(cfg, seed=1)
    folder = wl.write_folder(tmp_path / "wenet", cfg, sd)
    # Wenet's init_model reads the CMVN file train.yaml names; point it at the folder's copy.
    configs = yaml.safe_load((folder / "train.yaml").read_text())
    configs["cmvn_conf"]["cmvn_file"] = str(folder / "global_cmvn")
    args = types.SimpleNamespace(checkpoint=str(folder / "final.pt"))
    wenet, _ = wenet_init_model()(args, configs)
    wenet.eval()
    # The layout the committed tests build is Wenet's: the same tensor names and shapes.
    assert {k: tuple(v.shape) for k, v in wenet.state_dict().items()} == {k: tuple(v.shape) for k, v in sd.items()}
    ours, _, _ = load_model(write_checkpoint(import_wenet(folder), tmp_path / "imported.ckpt"))
    x = torch.randn(1, 400, wl.F_IN, generator=torch.Generator().manual_seed(5)) * 3 + 2
    lens = torch.tensor([x.size(1)])
    print(f"\n{cfg['encoder_conf']['pos_enc_layer_type']}, causal={cfg['encoder_conf']['causal']}, "
          f"{cfg['encoder_conf']['cnn_module_norm']}, {cfg['encoder_conf']['input_layer']}, decoder {cfg['decoder']}")
    with torch.no_grad():
        for chunk, left in ((0, -1), (16, 4), (8, -1)):
            w_out, _ = wenet.encoder(x, lens, chunk if chunk else -1, left)
            o_out, _ = ours.encode(x, lens, chunk, left)
            report(f"encoder output, chunk {chunk} left {left}", o_out, w_out)
            report(f"CTC log-probs, chunk {chunk} left {left}", ours.ctc_log_probs(o_out),
                   wenet.ctc.log_softmax(w_out))
        if cfg["encoder_conf"]["causal"]:
            for chunk, left in ((16, 4), (4, -1)):
                w_stream, _ = wenet.encoder.forward_chunk_by_chunk(x, chunk, left)
                state = ours.encoder.init_state(1, chunk, left)
                o_stream, _ = ours.encoder.stream_step(x, state, final=True)
                # forward_chunk_by_chunk drops a last window shorter than the subsampling context.
                report(f"streaming chunk {chunk} left {left}", o_stream[:, : w_stream.size(1)], w_stream)
        w_out, _ = wenet.encoder(x, lens, -1, -1)
        hyps = [[3, 4, 2, 5, 6], [7], [2, 3]]
        pad = torch.nn.utils.rnn.pad_sequence([torch.tensor([7] + h) for h in hyps], True, -1)  # <sos> first
        eos = cfg["output_dim"] - 1
        pad[:, 0] = eos
        pad = pad.masked_fill(pad == -1, eos)
        l2r, r2l = wenet.forward_attention_decoder(pad, torch.tensor([len(h) + 1 for h in hyps]), w_out, 0.3)
        want_l2r = torch.tensor([sum(float(l2r[i, j, w]) for j, w in enumerate(h)) + float(l2r[i, len(h), eos])
                                 for i, h in enumerate(hyps)])
        got_l2r = ours.score_hypotheses(w_out, w_out.size(1), hyps, 0.0)
        report("attention rescoring L2R", got_l2r, want_l2r)
        if cfg["decoder"] == "bitransformer":
            want_r2l = torch.tensor([sum(float(r2l[i, len(h) - j - 1, w]) for j, w in enumerate(h))
                                     + float(r2l[i, len(h), eos]) for i, h in enumerate(hyps)])
            got_mix = ours.score_hypotheses(w_out, w_out.size(1), hyps, 1.0)  # the R2L score alone
            report("attention rescoring R2L", got_mix, want_r2l)
