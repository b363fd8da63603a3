"""Wenet's ``train.yaml`` -> this toolkit's model kwargs and feature options, every key accounted for.

What a model section (``encoder_conf``, ``decoder_conf``, ``model_conf``, ``ctc_conf``,
``tokenizer_conf``, ``dataset_conf.fbank_conf``) holds is, key by key, either

- mapped (``output_size`` -> ``d_model``, ``cnn_module_norm`` -> a folded BatchNorm ...),
- checked: only the value this toolkit computes is accepted (``normalize_before: true``,
  ``activation_type: swish`` ...), anything else is a one-line error naming the key,
- a training-only option that does not change the function of the trained model
  (dropout rates, chunk training, SDPA): listed in the import notes,

and a key none of these know is an error naming it: nothing is dropped silently. The
defaults are Wenet's own constructor defaults (a key absent from train.yaml has them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from asr.data.features import SAMPLE_RATE

# Wenet's input_layer -> our subsampling rate.
SUBSAMPLING = {"conv2d": 4, "conv2d6": 6, "conv2d8": 8}
# (pos_enc_layer_type, selfattention_layer_type) -> our position scheme.
POSITIONS = {("rel_pos", "rel_selfattn"): "wenet_rel", ("abs_pos", "selfattn"): "abs_sin",
             ("no_pos", "selfattn"): "none"}
FRAME_SHIFT_MS = 10.0  # fixed project-wide (asr.data.features)
WENET_SAMPLE_SCALE = 32768.0  # Wenet multiplies the [-1, 1] waveform by 1 << 15 before the fbank


class WenetImportError(ValueError):
    """A Wenet model folder this importer cannot map; the message is one line naming the cause."""


class Section:
    """One mapping of train.yaml, read key by key; :meth:`finish` refuses the keys nobody read."""

    def __init__(self, name: str, values: Any, notes: list[str]) -> None:
        if values is None:
            values = {}
        if not isinstance(values, dict):
            raise WenetImportError(f"train.yaml: {name} must be a mapping, got {type(values).__name__}.")
        self.name, self.values, self.notes, self.read = name, values, notes, set()

    def get(self, key: str, default: Any = None) -> Any:
        """A mapped value (Wenet's default when absent)."""
        self.read.add(key)
        return self.values.get(key, default)

    def require(self, key: str, default: Any, *allowed: Any) -> Any:
        """A value this toolkit computes only one way: anything but ``allowed`` is an error."""
        value = self.get(key, default)
        if value not in allowed:
            raise WenetImportError(
                f"train.yaml: {self.name}.{key} = {value!r} cannot be imported (supported: "
                f"{', '.join(repr(a) for a in allowed)})."
            )
        return value

    def training_only(self, *keys: str) -> None:
        """Options that shape training, not the trained function: noted when present."""
        for key in keys:
            self.read.add(key)
            if key in self.values:
                self.notes.append(f"{self.name}.{key} = {self.values[key]!r} (training only, not carried over)")

    def finish(self) -> None:
        unknown = sorted(set(self.values) - self.read)
        if unknown:
            raise WenetImportError(f"train.yaml: unknown option {self.name}.{unknown[0]} (this importer does not "
                                   f"know what it changes; {len(unknown)} unknown in {self.name}: {unknown}).")


@dataclass
class WenetModelConfig:
    """What train.yaml says about the model, in this toolkit's terms.

    ``model_kwargs``: ``build_asr_model`` kwargs (vocab size from ``output_dim``);
    ``biases``: per bias flag (``query_bias`` ...), False when Wenet built the layer without
    one (the importer then fills zeros: the same function); ``conv_batch_norm``: fold the
    conv module's BatchNorm; ``tie_word_embedding``: the decoder output shares the embedding;
    ``features``: the fbank options Wenet computed features with (``asr.data.features``
    names); ``tokenizer``: ``bpe``, ``char`` or None (train.yaml does not say: Wenet before 3.0);
    ``notes``: what was not carried over.
    """

    model_kwargs: dict[str, Any]
    biases: dict[str, bool]
    conv_batch_norm: bool
    conv_norm_eps: float
    tie_word_embedding: bool
    features: dict[str, Any]
    tokenizer: str | None
    bpe_file: str | None
    cmvn_file: str | None
    cmvn_is_json: bool | None
    notes: list[str] = field(default_factory=list)


def _read_encoder(cfg: dict, notes: list[str]) -> tuple[dict[str, Any], dict[str, bool], bool, float]:
    encoder_type = cfg.get("encoder", "conformer")
    if encoder_type != "conformer":
        raise WenetImportError(f"train.yaml: encoder = {encoder_type!r} cannot be imported (only 'conformer').")
    conf = Section("encoder_conf", cfg.get("encoder_conf"), notes)
    d_model, heads = int(conf.get("output_size", 256)), int(conf.get("attention_heads", 4))
    input_layer = conf.get("input_layer", "conv2d")
    if input_layer not in SUBSAMPLING:
        raise WenetImportError(f"train.yaml: encoder_conf.input_layer = {input_layer!r} cannot be imported "
                               f"(supported: {', '.join(SUBSAMPLING)}).")
    positions = (conf.get("pos_enc_layer_type", "rel_pos"), conf.get("selfattention_layer_type", "rel_selfattn"))
    if positions not in POSITIONS:
        raise WenetImportError(
            f"train.yaml: encoder_conf.pos_enc_layer_type / selfattention_layer_type = {positions[0]!r} / "
            f"{positions[1]!r} cannot be imported (supported pairs: {', '.join('/'.join(p) for p in POSITIONS)})."
        )
    norm = conf.require("cnn_module_norm", "batch_norm", "batch_norm", "layer_norm")
    conv_norm_eps = float(conf.get("conv_norm_eps", 1e-5))
    if norm == "layer_norm" and conv_norm_eps != 1e-5:
        raise WenetImportError(f"train.yaml: encoder_conf.conv_norm_eps = {conv_norm_eps} cannot be imported with "
                               "cnn_module_norm layer_norm (supported: 1e-05).")
    causal = bool(conf.get("causal", False))
    for key, default, allowed in (
        ("normalize_before", True, (True,)), ("macaron_style", True, (True,)), ("use_cnn_module", True, (True,)),
        ("activation_type", "swish", ("swish",)), ("layer_norm_type", "layer_norm", ("layer_norm",)),
        ("norm_eps", 1e-5, (1e-5,)), ("mlp_type", "position_wise_feed_forward", ("position_wise_feed_forward",)),
        ("conv_inner_factor", 2, (2,)), ("final_norm", True, (True,)), ("n_kv_head", None, (None, heads)),
        ("head_dim", None, (None, d_model // heads)), ("positionwise_conv_kernel_size", 1, (1,)),
        ("concat_after", False, (False,)),  # Wenet before mid-2022
    ):
        conf.require(key, default, *allowed)
    biases = {key: bool(conf.require(key, True, True, False))
              for key in ("query_bias", "key_bias", "value_bias", "conv_bias", "mlp_bias")}
    conf.training_only("positional_dropout_rate", "attention_dropout_rate", "static_chunk_size", "use_dynamic_chunk",
                       "use_dynamic_left_chunk", "gradient_checkpointing", "use_sdpa", "n_expert",
                       "n_expert_activated")
    encoder = {
        "pos_enc": POSITIONS[positions], "d_model": d_model, "num_heads": heads,
        "num_layers": int(conf.get("num_blocks", 6)), "ffn_dim": int(conf.get("linear_units", 2048)),
        "conv_kernel": int(conf.get("cnn_module_kernel", 15)), "causal": causal,
        "subsampling": SUBSAMPLING[input_layer], "subsampling_channels": None,
        "dropout": float(conf.get("dropout_rate", 0.1)), "xscale": True, "online_cmn_frames": 0.0,
        "conv_norm": "none" if norm == "batch_norm" else "layer_norm",
        # Wenet pads a causal conv module's INPUT with zeros (asr.model.conformer.ConvModule).
        "conv_causal_pad": "input" if causal else "depthwise",
    }
    conf.finish()
    return encoder, biases, norm == "batch_norm", conv_norm_eps


def _read_decoder(cfg: dict, heads_default: int, notes: list[str]) -> tuple[dict[str, Any], dict[str, bool], bool]:
    decoder_type = cfg.get("decoder", "bitransformer")
    if decoder_type not in ("transformer", "bitransformer"):
        raise WenetImportError(f"train.yaml: decoder = {decoder_type!r} cannot be imported "
                               "(supported: 'transformer', 'bitransformer').")
    conf = Section("decoder_conf", cfg.get("decoder_conf"), notes)
    r2l = int(conf.get("r_num_blocks", 0)) if decoder_type == "bitransformer" else 0
    if decoder_type == "bitransformer" and r2l < 1:
        raise WenetImportError("train.yaml: decoder_conf.r_num_blocks must be >= 1 for a bitransformer decoder.")
    heads = int(conf.get("attention_heads", heads_default))
    for key, default, allowed in (
        ("input_layer", "embed", ("embed",)), ("use_output_layer", True, (True,)), ("normalize_before", True, (True,)),
        ("src_attention", True, (True,)), ("activation_type", "relu", ("relu",)),
        ("layer_norm_type", "layer_norm", ("layer_norm",)), ("norm_eps", 1e-5, (1e-5,)),
        ("mlp_type", "position_wise_feed_forward", ("position_wise_feed_forward",)), ("n_kv_head", None, (None, heads)),
        ("head_dim", None, (None,)), ("concat_after", False, (False,)),
    ):
        conf.require(key, default, *allowed)
    biases = {f"decoder_{key}": bool(conf.require(key, True, True, False))
              for key in ("query_bias", "key_bias", "value_bias", "src_query_bias", "src_key_bias", "src_value_bias",
                          "mlp_bias")}
    tied = bool(conf.require("tie_word_embedding", False, True, False))
    conf.training_only("positional_dropout_rate", "self_attention_dropout_rate", "src_attention_dropout_rate",
                       "gradient_checkpointing", "use_sdpa", "n_expert", "n_expert_activated")
    decoder = {
        "decoder_layers": int(conf.get("num_blocks", 6)), "r2l_decoder_layers": r2l, "decoder_heads": heads,
        "decoder_ffn_dim": int(conf.get("linear_units", 2048)), "decoder_dropout": float(conf.get("dropout_rate", 0.1)),
    }
    conf.finish()
    return decoder, biases, tied


def _wenet_fbank(bins: int, frame_length_ms: float, window_type: str) -> dict[str, Any]:
    """asr.data.features.FeatureConfig: the frames every frontend computes for the model. The
    rest is torchaudio's Kaldi defaults, where Wenet's compute_fbank leaves them; dither is 0,
    as Wenet decodes (its recognizer sets fbank_conf.dither to 0)."""
    return {
        "num_mel_bins": bins, "frame_length_ms": float(frame_length_ms), "snip_edges": True,
        "low_freq": 20.0, "high_freq": 0.0, "window_type": window_type, "preemphasis": 0.97,
        "remove_dc_offset": True, "dither": 0.0, "sample_scale": WENET_SAMPLE_SCALE,
    }


def _note_dither(key: str, dither: float, notes: list[str]) -> None:
    if dither:
        notes.append(f"{key} = {dither}: Wenet's training dither; the model runs without dither, as Wenet "
                     f"decodes (fine-tune as Wenet trained: features.dither={dither})")


def _read_features(cfg: dict, input_dim: int, notes: list[str]) -> dict[str, Any]:
    dataset = cfg.get("dataset_conf") or {}
    if "fbank_conf" not in dataset and "collate_conf" in cfg:
        return _read_v1_features(cfg, input_dim, notes)
    feats_type = dataset.get("feats_type", "fbank")
    if feats_type != "fbank":
        raise WenetImportError(f"train.yaml: dataset_conf.feats_type = {feats_type!r} cannot be imported (only fbank).")
    rate = (dataset.get("resample_conf") or {}).get("resample_rate", SAMPLE_RATE)  # none given: nothing to refuse
    if rate != SAMPLE_RATE:
        raise WenetImportError(f"train.yaml: dataset_conf.resample_conf.resample_rate = {rate} cannot be imported "
                               f"(this toolkit runs at {SAMPLE_RATE} Hz).")
    if "fbank_conf" not in dataset:
        raise WenetImportError(
            "train.yaml: dataset_conf.fbank_conf is missing: the feature options of the model are unknown. Add the "
            "ones it was trained with, e.g. Wenet's recipe values: dataset_conf: {fbank_conf: {num_mel_bins: "
            f"{input_dim}, frame_shift: 10, frame_length: 25, dither: 1.0}}}} (num_mel_bins = input_dim, {input_dim}).")
    conf = Section("dataset_conf.fbank_conf", dataset["fbank_conf"], notes)
    bins = int(conf.get("num_mel_bins", 23))
    if bins != input_dim:
        raise WenetImportError(f"train.yaml: dataset_conf.fbank_conf.num_mel_bins ({bins}) differs from "
                               f"input_dim ({input_dim}).")
    conf.require("frame_shift", 10, 10, 10.0)
    _note_dither("dataset_conf.fbank_conf.dither", float(conf.get("dither", 0.0)), notes)
    features = _wenet_fbank(bins, conf.get("frame_length", 25), conf.get("window_type", "povey"))
    conf.finish()
    return features


def _read_v1_features(cfg: dict, input_dim: int, notes: list[str]) -> dict[str, Any]:
    """Wenet 1.x: ``collate_conf.feature_extraction_conf``, computed from the waveform only when
    ``raw_wav`` is true (otherwise from Kaldi feature files whose options train.yaml does not hold)."""
    if not cfg.get("raw_wav", True):
        raise WenetImportError("train.yaml: raw_wav = false: the model was trained on precomputed Kaldi features "
                               "whose options train.yaml does not record; they cannot be imported.")
    collate = cfg["collate_conf"] or {}
    conf = Section("collate_conf.feature_extraction_conf", collate.get("feature_extraction_conf"), notes)
    conf.require("feature_type", "fbank", "fbank")
    conf.require("using_pitch", False, False)
    conf.require("frame_shift", 10, 10, 10.0)
    bins = int(conf.get("mel_bins", 80))
    if bins != input_dim:
        raise WenetImportError(f"train.yaml: collate_conf.feature_extraction_conf.mel_bins ({bins}) differs from "
                               f"input_dim ({input_dim}).")
    features = _wenet_fbank(bins, conf.get("frame_length", 25), "povey")
    conf.finish()
    _note_dither("collate_conf.wav_distortion_conf.wav_dither",
                 float((collate.get("wav_distortion_conf") or {}).get("wav_dither", 0.0)), notes)
    return features


def _read_tokenizer(cfg: dict, notes: list[str]) -> tuple[str | None, str | None]:
    """(``bpe``, ``char`` or None when train.yaml does not say, the BPE model's configured path).

    Wenet before 3.0 saved no tokenizer keys (its BPE model was a command-line argument), so
    an absent ``tokenizer`` is not ``char``: the folder decides (``asr.interop.wenet``)."""
    conf = Section("tokenizer_conf", cfg.get("tokenizer_conf"), notes)
    kind = cfg.get("tokenizer", "bpe" if conf.get("bpe_path") or cfg.get("bpe_model") else None)
    if kind is not None and kind not in ("bpe", "char"):
        raise WenetImportError(f"train.yaml: tokenizer = {kind!r} cannot be imported (supported: bpe, char).")
    special = conf.get("special_tokens")
    if special is not None:
        wanted = {"<blank>": 0, "<unk>": 1}
        bad = {k: v for k, v in special.items() if k in wanted and v != wanted[k]}
        if bad or special.get("<sos>") != special.get("<eos>"):
            raise WenetImportError(f"train.yaml: tokenizer_conf.special_tokens = {special} cannot be imported "
                                   "(supported: <blank> 0, <unk> 1, one <sos/eos> id).")
    if conf.get("non_lang_syms_path"):
        notes.append("tokenizer_conf.non_lang_syms_path (only how training text is split; not carried over)")
    conf.training_only("symbol_table_path", "split_with_space", "is_multilingual", "num_languages")
    conf.finish()
    bpe = conf.values.get("bpe_path") or (cfg.get("bpe_model") if kind == "bpe" else None)
    return kind, bpe


def read_train_config(cfg: Any, vocab_size: int | None = None) -> WenetModelConfig:
    """Map a parsed train.yaml (a dict) to :class:`WenetModelConfig`; ``WenetImportError`` otherwise."""
    if not isinstance(cfg, dict):
        raise WenetImportError(f"train.yaml must be a mapping, got {type(cfg).__name__}.")
    model_type = cfg.get("model", "asr_model")
    if model_type != "asr_model":
        raise WenetImportError(f"train.yaml: model = {model_type!r} cannot be imported (only asr_model, CTC + "
                               "attention).")
    if cfg.get("ctc", "ctc") != "ctc":
        raise WenetImportError(f"train.yaml: ctc = {cfg.get('ctc')!r} cannot be imported (only 'ctc').")
    notes: list[str] = []
    for key in ("input_dim", "output_dim"):
        if not isinstance(cfg.get(key), int):
            raise WenetImportError(f"train.yaml: {key} is missing or not an integer ({cfg.get(key)!r}).")
    ctc_conf = Section("ctc_conf", cfg.get("ctc_conf"), notes)
    ctc_conf.require("ctc_blank_id", 0, 0)
    ctc_conf.finish()
    encoder, biases, batch_norm, conv_eps = _read_encoder(cfg, notes)
    encoder["input_dim"] = cfg["input_dim"]
    decoder, decoder_biases, tied = _read_decoder(cfg, encoder["num_heads"], notes)
    model_conf = Section("model_conf", cfg.get("model_conf"), notes)
    losses = {"ctc_weight": float(model_conf.get("ctc_weight", 0.5)),
              "reverse_weight": float(model_conf.get("reverse_weight", 0.0)),
              "lsm_weight": float(model_conf.get("lsm_weight", 0.0))}
    model_conf.training_only("length_normalized_loss", "special_tokens")
    model_conf.finish()
    if decoder["r2l_decoder_layers"] == 0:
        losses["reverse_weight"] = 0.0  # only a bitransformer has a right-to-left loss
    features = _read_features(cfg, cfg["input_dim"], notes)
    tokenizer, bpe = _read_tokenizer(cfg, notes)
    cmvn = cfg.get("cmvn_conf") or {}
    cmvn_file = cmvn.get("cmvn_file", cfg.get("cmvn_file"))
    is_json = cmvn.get("is_json_cmvn", cfg.get("is_json_cmvn"))
    output_dim = int(cfg["output_dim"])
    if vocab_size is not None and vocab_size != output_dim:
        raise WenetImportError(f"train.yaml: output_dim ({output_dim}) differs from the CTC layer of final.pt "
                               f"({vocab_size} outputs).")
    model_kwargs = {
        "vocab_size": output_dim, "sos_eos_id": output_dim - 1, "blank_id": 0, "encoder_kwargs": encoder,
        **decoder, **losses,
    }
    return WenetModelConfig(
        model_kwargs=model_kwargs, biases={**biases, **decoder_biases}, conv_batch_norm=batch_norm,
        conv_norm_eps=conv_eps, tie_word_embedding=tied, features=features, tokenizer=tokenizer, bpe_file=bpe,
        cmvn_file=cmvn_file, cmvn_is_json=is_json, notes=notes,
    )
