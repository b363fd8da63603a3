"""A tiny random model, a char tokenizer and test audio shared by the serving tests."""

from __future__ import annotations

from pathlib import Path

import torch

from asr.data.tokenizer import load_tokenizer, write_char_units
from asr.model.asr_model import build_asr_model

N_MELS = 80


def tiny_tokenizer(folder: Path):
    return load_tokenizer(write_char_units(["abc de fgh"], folder))


def model_kwargs(tokenizer, pos_enc: str = "rel_xl", **scheme_options) -> dict:
    """``scheme_options``: position-scheme options (e.g. ``max_len`` for abs_learned)."""
    return dict(
        vocab_size=tokenizer.vocab_size, sos_eos_id=tokenizer.sos_eos_id, blank_id=tokenizer.blank_id,
        encoder_kwargs=dict(pos_enc=pos_enc, input_dim=N_MELS, d_model=32, num_heads=2, num_layers=2, ffn_dim=64,
                            conv_kernel=3, causal=True, **scheme_options),
        decoder_layers=1, r2l_decoder_layers=0, decoder_heads=2, decoder_ffn_dim=64,
    )


def tiny_model(tokenizer, pos_enc: str = "rel_xl", seed: int = 0, **scheme_options):
    torch.manual_seed(seed)
    model = build_asr_model(**model_kwargs(tokenizer, pos_enc, **scheme_options))
    # Fbank values near zero mean, so the random model emits tokens as well as blanks.
    model.encoder.set_cmvn(torch.full((N_MELS,), -5.0), torch.full((N_MELS,), 0.5))
    return model.eval()


def fitted_model(tokenizer, pos_enc: str = "rel_xl", seed: int = 0):
    """:func:`tiny_model` with CMVN fitted to the fbank of :func:`noise` (raw mean ~20), so its inputs
    are ~N(0, 1) as a trained model's are (tiny_model's fixed CMVN leaves them near 50)."""
    from asr.data.features import SAMPLE_RATE, FbankExtractor

    model = tiny_model(tokenizer, pos_enc, seed)
    feats = FbankExtractor()(noise(3.0, 1, SAMPLE_RATE))  # (T, F)
    model.encoder.set_cmvn(feats.mean(0), feats.std(0))
    return model


def noise(seconds: float, seed: int, sample_rate: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return 0.1 * torch.randn(int(seconds * sample_rate), generator=g)


def save_checkpoint(folder: Path, pos_enc: str = "rel_xl") -> Path:
    """A tiny random model in the training checkpoint format (what scripts load with load_model)."""
    from asr.train.checkpoint import TOKENIZER_KEY, pack_tokenizer

    units = write_char_units(["abc de fgh"], folder / "tok")
    tokenizer = load_tokenizer(units)
    model = tiny_model(tokenizer, pos_enc)
    path = folder / "tiny.ckpt"
    torch.save(
        {
            "state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
            "hyper_parameters": {"model_kwargs": model_kwargs(tokenizer, pos_enc), "cfg": {}},
            TOKENIZER_KEY: pack_tokenizer(units),
        },
        path,
    )
    return path
