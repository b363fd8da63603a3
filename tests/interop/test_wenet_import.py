"""The Wenet importer on small random models in Wenet's released layout (tests/interop/wenet_layout.py).

The imported model must compute what Wenet's formulas compute (encoder output, CTC
log-probs, L2R and R2L rescoring scores; full context and with a chunk mask; streaming),
keep Wenet's token ids, and refuse what it cannot map with one line.
"""

from __future__ import annotations

import pickle

import pytest
import torch
import yaml

from asr.interop.wenet import import_wenet, read_cmvn, write_checkpoint
from asr.interop.wenet_config import WenetImportError
from asr.train.checkpoint import load_model
from tests.interop import wenet_layout as wl

VARIANTS = {
    "u2pp_causal_bn_rel": {},
    "layer_norm_noncausal_abs": {"causal": False, "norm": "layer_norm", "pos": "abs_pos", "decoder": "transformer"},
    "conv2d6_layer_norm": {"input_layer": "conv2d6", "norm": "layer_norm"},
    "conv2d8": {"input_layer": "conv2d8", "kernel": 3},
}


def imported(tmp_path, cmvn_json=True, **options):
    cfg = wl.config(**options)
    sd = wl.state_dict(cfg)
    folder = wl.write_folder(tmp_path / "wenet", cfg, sd, cmvn_json=cmvn_json)
    ckpt = write_checkpoint(import_wenet(folder), tmp_path / "imported.ckpt")
    model, tokenizer, _ = load_model(ckpt)
    return cfg, sd, model.double(), tokenizer, ckpt


def feats(t=120, seed=3):
    return torch.randn(1, t, wl.F_IN, generator=torch.Generator().manual_seed(seed)) * 2 + 1


@pytest.mark.parametrize("variant", VARIANTS)
def test_imported_model_computes_wenets_function(tmp_path, variant):
    cfg, sd, model, _, _ = imported(tmp_path, **VARIANTS[variant])
    x = feats()
    with torch.no_grad():
        for chunk, left in ((0, -1), (4, 2)):
            ours, lens = model.encode(x.double(), torch.tensor([x.size(1)]), chunk, left)
            expected = wl.encoder_forward(sd, cfg, x, chunk, left)
            # Not 1e-9: the folded batch norm is rounded to float32 like every weight of final.pt.
            torch.testing.assert_close(ours, expected, rtol=1e-6, atol=1e-6)
            torch.testing.assert_close(model.ctc_log_probs(ours), wl.ctc_log_probs(sd, expected).float(),
                                       rtol=1e-5, atol=1e-5)
        hyps = [[3, 4, 2, 5], [6], []]
        for reverse_weight in ((0.0, 0.3) if cfg["decoder"] == "bitransformer" else (0.0,)):
            got = model.score_hypotheses(ours, lens[0], hyps, reverse_weight)
            left_name = "decoder.left_decoder" if cfg["decoder"] == "bitransformer" else "decoder"
            want = [wl.decoder_score(sd, cfg, left_name, ours, h) for h in hyps]
            if reverse_weight:
                r2l = [wl.decoder_score(sd, cfg, "decoder.right_decoder", ours, h[::-1]) for h in hyps]
                want = [(1 - reverse_weight) * a + reverse_weight * b for a, b in zip(want, r2l)]
            torch.testing.assert_close(got.double(), torch.tensor(want, dtype=torch.float64), rtol=1e-5, atol=1e-5)


def test_streaming_equals_wenets_chunk_masked_forward(tmp_path):
    cfg, sd, model, _, _ = imported(tmp_path)
    x = feats(150)
    enc = model.encoder
    state = enc.init_state(1, 4, 2)
    outs = []
    with torch.no_grad():
        for start in range(0, x.size(1), 23):
            out, state = enc.stream_step(x[:, start : start + 23].double(), state, final=start + 23 >= x.size(1))
            outs.append(out)
        torch.testing.assert_close(torch.cat(outs, 1), wl.encoder_forward(sd, cfg, x, 4, 2), rtol=1e-6, atol=1e-6)


def test_token_ids_features_and_kwargs_are_carried(tmp_path):
    cfg, _, model, tokenizer, ckpt = imported(tmp_path)
    assert (tokenizer.vocab_size, tokenizer.blank_id, tokenizer.sos_eos_id) == (len(wl.UNITS), 0, len(wl.UNITS) - 1)
    assert tokenizer.encode("ab cd") == [3, 4, 2, 5, 6] and tokenizer.decode([3, 4, 2, 5, 6]) == "ab cd"
    hp = torch.load(ckpt, weights_only=False)["hyper_parameters"]
    # Wenet's fbank: what every frontend computes for the model (dither off, as Wenet decodes) ...
    from asr.data.features import LEGACY, FeatureConfig

    assert FeatureConfig.from_dict(hp["features"]) == FeatureConfig.from_dict({**LEGACY.to_dict(), "num_mel_bins": wl.F_IN})
    assert hp["features"]["sample_scale"] == 32768.0 and hp["features"]["dither"] == 0.0
    # ... and its training dither, said where fine-tuning looks.
    assert any("features.dither=1.0" in n for n in hp["wenet_import_notes"])
    enc = hp["model_kwargs"]["encoder_kwargs"]
    assert (enc["pos_enc"], enc["conv_norm"], enc["conv_causal_pad"]) == ("wenet_rel", "none", "input")
    assert hp["model_kwargs"]["reverse_weight"] == 0.3 and model.r2l_decoder is not None
    assert any("positional_dropout_rate" in n for n in hp["wenet_import_notes"])


def bpe_units(tmp_path, lines, vocab_size):
    """A BPE model trained on ``lines`` and the units.txt Wenet makes of its pieces: (units, processor)."""
    sentencepiece = pytest.importorskip("sentencepiece")
    text = tmp_path / "text.txt"
    text.write_text("\n".join(lines * 20))
    sentencepiece.SentencePieceTrainer.train(input=str(text), model_prefix=str(tmp_path / "bpe"),
                                             vocab_size=vocab_size, model_type="bpe", minloglevel=2)
    sp = sentencepiece.SentencePieceProcessor(model_file=str(tmp_path / "bpe.model"))
    pieces = sorted({p for line in lines for p in sp.encode(line, out_type=str)})
    return ["<blank>", "<unk>", *pieces, "<sos/eos>"], sp


def test_bpe_units_keep_wenets_ids(tmp_path):
    units, sp = bpe_units(tmp_path, ["A CAB BAD", "DEAD BEAD CAB", "ABBA DAB"], 12)
    cfg = wl.config(vocab=len(units), tokenizer="bpe")
    folder = wl.write_folder(tmp_path / "wenet", cfg, wl.state_dict(cfg), units=units, bpe_model=tmp_path / "bpe.model")
    _, tokenizer, _ = load_model(write_checkpoint(import_wenet(folder), tmp_path / "imported.ckpt"))
    ids = tokenizer.encode("dead cab")  # Wenet upper-cases before its BPE
    assert ids == [units.index(p) for p in sp.encode("DEAD CAB", out_type=str)]
    assert tokenizer.decode(ids) == "DEAD CAB"


def old_layout(cfg: dict) -> dict:
    """train.yaml as Wenet 2.x saved it: no tokenizer keys, CMVN at the top level."""
    cfg = {k: v for k, v in cfg.items() if k not in ("tokenizer", "tokenizer_conf", "cmvn", "cmvn_conf")}
    return {**cfg, "cmvn_file": "/train/exp/u2pp/global_cmvn", "is_json_cmvn": True}


def test_an_old_english_layout_imports_with_its_bpe_units(tmp_path):
    units, sp = bpe_units(tmp_path, ["HELLO WORLD", "WORD HOLD", "OLD LORE HELD"], 16)
    cfg = old_layout(wl.config(vocab=len(units)))
    folder = wl.write_folder(tmp_path / "wenet", cfg, wl.state_dict(cfg), units=units, bpe_model=tmp_path / "bpe.model")
    imported_model = import_wenet(folder)
    assert imported_model.config.tokenizer == "bpe"
    assert any("names no tokenizer" in n and "BPE" in n for n in imported_model.notes)
    _, tokenizer, _ = load_model(write_checkpoint(imported_model, tmp_path / "imported.ckpt"))
    ids = tokenizer.encode("hello world")
    assert ids == [units.index(p) for p in sp.encode("HELLO WORLD", out_type=str)] and 1 not in ids  # no <unk>
    assert tokenizer.decode(ids) == "HELLO WORLD"


def test_word_pieces_without_their_bpe_model_are_refused_not_guessed(tmp_path):
    units, _ = bpe_units(tmp_path, ["HELLO WORLD", "WORD HOLD", "OLD LORE HELD"], 16)

    def drop_bpe(folder, cfg, sd):
        (folder / "train.yaml").write_text(yaml.safe_dump(old_layout(wl.config(vocab=len(units)))))
        (folder / "units.txt").write_text("".join(f"{u} {i}\n" for i, u in enumerate(units)), encoding="utf-8")
        torch.save(wl.state_dict(wl.config(vocab=len(units))), folder / "final.pt")

    message = refusal(tmp_path, drop_bpe)
    assert "names no tokenizer" in message and "word pieces" in message and "bpe.model" in message


def test_an_old_char_layout_imports_as_chars(tmp_path):
    cfg = old_layout(wl.config())
    folder = wl.write_folder(tmp_path / "wenet", cfg, wl.state_dict(cfg))
    imported_model = import_wenet(folder)
    assert imported_model.config.tokenizer == "char" and any("char units" in n for n in imported_model.notes)


def test_a_wenet_1_layout_reads_its_fbank_options_from_collate_conf(tmp_path):
    cfg = old_layout(wl.config())
    fbank = cfg.pop("dataset_conf")["fbank_conf"]
    cfg.update(raw_wav=True, dataset_conf={"batch_size": 16}, collate_conf={
        "wav_distortion_conf": {"wav_dither": 0.1}, "speed_perturb": True, "spec_aug": True,
        "feature_extraction_conf": {"feature_type": "fbank", "mel_bins": fbank["num_mel_bins"], "frame_shift": 10,
                                    "frame_length": 25, "using_pitch": False}})
    folder = wl.write_folder(tmp_path / "wenet", cfg, wl.state_dict(cfg))
    imported_model = import_wenet(folder)
    assert imported_model.config.features == import_wenet(wl.write_folder(
        tmp_path / "new", wl.config(), wl.state_dict(wl.config()))).config.features
    assert any("features.dither=0.1" in n for n in imported_model.notes)
    (folder / "train.yaml").write_text(yaml.safe_dump({**cfg, "raw_wav": False}))
    with pytest.raises(WenetImportError, match="raw_wav = false"):
        import_wenet(folder)



def test_a_train_yaml_without_fbank_conf_is_refused_with_what_to_add(tmp_path):
    import re

    cfg = wl.config()
    del cfg["dataset_conf"]["fbank_conf"]
    folder = wl.write_folder(tmp_path / "wenet", cfg, wl.state_dict(cfg))
    with pytest.raises(WenetImportError, match="fbank_conf is missing") as err:
        import_wenet(folder)
    # the message's YAML, added as it says, makes the folder import, with the bins of the model
    suggested = yaml.safe_load(re.search(r"dataset_conf: (\{.*\}) \(", str(err.value)).group(1))
    cfg["dataset_conf"].update(suggested)
    (folder / "train.yaml").write_text(yaml.safe_dump(cfg))
    assert import_wenet(folder).config.features["num_mel_bins"] == wl.F_IN

@pytest.mark.parametrize("key", ["model", "state_dict"])
def test_a_wrapped_state_dict_is_unwrapped_with_a_note(tmp_path, key):
    cfg = wl.config()
    sd = wl.state_dict(cfg)
    folder = wl.write_folder(tmp_path / "wenet", cfg, sd)
    torch.save({key: sd, "epoch": 7, "step": 1000}, folder / "final.pt")
    imported_model = import_wenet(folder)
    assert any(f"wrapped under {key!r}" in n for n in imported_model.notes)
    plain = import_wenet(wl.write_folder(tmp_path / "plain", cfg, sd))
    assert all(torch.equal(v, plain.state_dict[k]) for k, v in imported_model.state_dict.items())


def test_kaldi_and_json_cmvn_agree(tmp_path):
    mean, istd = torch.randn(wl.F_IN), torch.rand(wl.F_IN) + 0.5
    for as_json in (True, False):
        path = tmp_path / f"cmvn_{as_json}"
        wl.write_cmvn(path, mean, istd, as_json)
        got_mean, got_istd = read_cmvn(path, as_json)
        torch.testing.assert_close(got_mean, mean)
        torch.testing.assert_close(got_istd, istd, rtol=1e-4, atol=1e-4)
    cfg = wl.config(cmvn_json=False)
    sd = wl.state_dict(cfg)
    del sd["encoder.global_cmvn.mean"], sd["encoder.global_cmvn.istd"]  # CMVN only in the Kaldi file
    folder = wl.write_folder(tmp_path / "w", cfg, {**sd, "encoder.global_cmvn.mean": mean,
                                                   "encoder.global_cmvn.istd": istd}, cmvn_json=False)
    torch.save(sd, folder / "final.pt")
    state = import_wenet(folder).state_dict
    torch.testing.assert_close(state["encoder.cmvn_istd"], istd, rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------------------- refusals

def refusal(tmp_path, change) -> str:
    cfg = wl.config()
    sd = wl.state_dict(cfg)
    folder = wl.write_folder(tmp_path / "wenet", cfg, sd)
    change(folder, cfg, sd)
    with pytest.raises(WenetImportError) as err:
        import_wenet(folder)
    message = str(err.value)
    assert "\n" not in message
    return message


def test_refuses_missing_file(tmp_path):
    assert "missing units.txt" in refusal(tmp_path, lambda f, c, s: (f / "units.txt").unlink())


def test_refuses_a_checkpoint_that_is_not_wenets(tmp_path):
    lightning_like = {"state_dict": {"model.encoder.norm.weight": torch.ones(2)}, "hyper_parameters": {}}
    assert "not a Wenet checkpoint" in refusal(tmp_path, lambda f, c, s: torch.save(lightning_like, f / "final.pt"))
    other = {"backbone.weight": torch.ones(2)}
    assert "not a Wenet ASR checkpoint" in refusal(tmp_path, lambda f, c, s: torch.save(other, f / "final.pt"))


class _Payload:
    def __reduce__(self):
        return (print, ("this would run at load time",))


def test_refuses_a_pickle_that_needs_code(tmp_path):
    def poison(folder, cfg, sd):
        with open(folder / "final.pt", "wb") as f:
            pickle.dump({"encoder.x": _Payload()}, f)

    assert "carries code (refused: loading it could run code): its pickle names builtins.print" in refusal(tmp_path, poison)


def test_refuses_unsupported_encoder_and_unknown_options(tmp_path):
    def rewrite(**changes):
        def change(folder, cfg, sd):
            for section, values in changes.items():
                cfg[section] = {**cfg[section], **values} if isinstance(values, dict) else values
            (folder / "train.yaml").write_text(yaml.safe_dump(cfg))
        return change

    assert "encoder = 'squeezeformer'" in refusal(tmp_path / "a", rewrite(encoder="squeezeformer"))
    assert "encoder_conf.macaron_style" in refusal(tmp_path / "b", rewrite(encoder_conf={"macaron_style": False}))
    assert "unknown option encoder_conf.fancy" in refusal(tmp_path / "c", rewrite(encoder_conf={"fancy": 1}))
    assert "input_layer" in refusal(tmp_path / "d", rewrite(encoder_conf={"input_layer": "conv2d2"}))
    resampled = rewrite(dataset_conf={**wl.config()["dataset_conf"], "resample_conf": {"resample_rate": 8000}})
    assert "resample_rate = 8000 cannot be imported (this toolkit runs at 16000 Hz)" in refusal(tmp_path / "e", resampled)


def test_refuses_units_that_do_not_match_the_ctc_layer(tmp_path):
    def drop_unit(folder, cfg, sd):
        units = wl.UNITS[:-2] + wl.UNITS[-1:]
        (folder / "units.txt").write_text("".join(f"{u} {i}\n" for i, u in enumerate(units)))

    assert "units.txt has 8 units but the CTC layer of final.pt has 9" in refusal(tmp_path, drop_unit)


def test_refuses_to_drop_an_unused_tensor(tmp_path):
    def extra(folder, cfg, sd):
        torch.save({**sd, "encoder.encoders.0.adapter.weight": torch.ones(3)}, folder / "final.pt")

    assert "encoder.encoders.0.adapter.weight" in refusal(tmp_path, extra)


def test_script_refuses_with_one_line_and_status_2(tmp_path, capsys):
    from scripts.import_wenet import main

    assert main([str(tmp_path / "nowhere"), "--out", str(tmp_path / "x.ckpt")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("import_wenet: ") and err.count("\n") == 1 and "Traceback" not in err


def test_an_imported_model_is_a_fine_tuning_source(tmp_path):
    """init_from reads the imported checkpoint (weights_only=True) and every tensor loads as it is."""
    from asr.model.asr_model import build_asr_model
    from asr.train.init_from import finetune_model_kwargs, load_source_weights, read_source

    _, _, model, tokenizer, ckpt = imported(tmp_path)
    source = read_source(ckpt)
    run_kwargs = {"vocab_size": tokenizer.vocab_size, "sos_eos_id": tokenizer.sos_eos_id, "blank_id": 0,
                  "ctc_weight": 0.5, "encoder_kwargs": {"dropout": 0.0}}
    fresh = build_asr_model(**finetune_model_kwargs(source, run_kwargs))
    report = load_source_weights(fresh, source, tokenizer)
    assert not report.reinitialized and not report.rows_kept and not report.unused
    assert fresh.ctc_weight == 0.5 and fresh.encoder.scheme.name == "wenet_rel"
    for name, value in fresh.state_dict().items():
        assert torch.equal(value, model.state_dict()[name].float()), name
