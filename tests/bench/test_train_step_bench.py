"""The step profiler and the interleaved comparison (asr/bench/train_step.py), the encoder
side-by-side (asr/bench/encoders.py), on tiny models: their accounting, not their timings."""

from pathlib import Path

import torch
from hydra import compose, initialize_config_dir

from asr.bench.encoders import EncoderSize, benchmark, fwd_bwd, table
from asr.bench.train_step import (
    PHASES, build_synthetic, compare_steps, profile_steps, synthetic_batches, time_optimizers,
)

CONF = Path(__file__).resolve().parents[2] / "conf"

TINY = ["model.encoder.d_model=16", "model.encoder.num_heads=2", "model.encoder.num_layers=1",
        "model.encoder.ffn_dim=32", "model.decoder_layers=1", "model.decoder_ffn_dim=32"]


def _cfg():
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("train", overrides=["experiment=quickstart", "out_dir=/tmp/unused", *TINY])


def test_synthetic_batches_are_duration_bucketed_and_padded():
    batches = synthetic_batches(5, max_duration=20.0, vocab_size=30, feat_dim=80, seconds=(1.0, 4.0))
    for b in batches:
        frames = b.feats.shape[1]
        assert b.feats.shape[0] * frames / 100 <= 20.0 + 4.0 and int(b.feat_lens.max()) == frames
        assert ((b.tokens == -1) == (torch.arange(b.tokens.shape[1])[None] >= b.token_lens[:, None])).all()
        assert b.tokens.max() < 30


def test_optimizer_table_times_the_three_adamw_variants_on_the_models_parameters():
    net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Conv2d(2, 2, 3).to(memory_format=torch.channels_last))
    lines = time_optimizers(net, repeats=2).splitlines()
    assert lines[0].startswith("4 tensors, 0.00 M parameters")  # 15 + 38 parameters
    assert [line.split()[0] for line in lines[2:]] == ["for-loop", "foreach", "fused"]
    assert all(float(line.split()[1]) >= 0 for line in lines[2:])


def test_profile_accounts_every_phase_of_the_step():
    cfg = _cfg()
    module, optimizer, scheduler = build_synthetic(cfg, 30)
    batches = synthetic_batches(4, 8.0, 30, 80, seconds=(1.0, 2.0))
    prof = profile_steps(module, optimizer, scheduler, batches, steps=3, warmup=1)
    assert prof.steps == 3 and set(prof.seconds) == set(PHASES)
    assert all(v >= 0 for v in prof.seconds.values()) and sum(prof.seconds.values()) <= prof.wall + 1e-6
    assert prof.seconds["encoder"] > 0 and prof.seconds["backward_encoder"] > 0
    assert "backward_encoder" in prof.table()


def test_interleaved_variants_see_the_same_batches_and_draws():
    cfg = _cfg()
    module, _, _ = build_synthetic(cfg, 30)
    batches = synthetic_batches(4, 8.0, 30, 80, seconds=(1.0, 2.0))
    a, b = compare_steps(cfg, module, batches, ["eager", "eager"], warmup=1, loss_every=1)
    assert len(a.wall) == len(b.wall) == 3 and a.graphs == b.graphs == 0
    assert a.losses == b.losses  # same initial model, batches and chunk draws: the same curve


def test_encoder_side_by_side_has_a_row_per_encoder():
    size = EncoderSize(input_dim=20, d_model=16, heads=2, layers=1, ffn_dim=32, kernel=3)
    results = benchmark(["ours"], size, batch=2, frames=40, repeats=2, warmup=1)
    assert [r.name for r in results] == ["ours"] and len(results[0].cpu) == 2 and results[0].params > 0
    assert "ours" in table(results)


def test_encoder_side_by_side_runs_every_forward_under_bf16_autocast_when_asked():
    weight = torch.nn.Parameter(torch.ones(4, 4))
    seen = []

    def run(feats, lens):
        seen.append(torch.is_autocast_enabled("cpu"))
        return feats @ weight

    feats, lens = torch.ones(1, 3, 4), torch.tensor([3])
    fwd_bwd(run, feats, lens, [weight], bf16=True)
    assert seen == [True] and weight.grad is not None and weight.grad.dtype == torch.float32
    fwd_bwd(run, feats, lens, [weight])
    assert seen == [True, False]


def test_build_training_gives_the_data_module_the_runs_fbank_options(monkeypatch):
    """As train() does: without them the data module extracted LEGACY fbank, so the profile measured
    another frontend and rebuilt the recipe's feature store for it."""
    from omegaconf import OmegaConf

    from asr.bench import train_step
    from asr.train.run import run_features

    seen = {}

    class FakeData:
        tokenizer = None
        cmvn_path = "cmvn.json"

        def prepare_data(self):
            pass

        def setup(self, stage):
            pass

    def fake_instantiate(node, **kwargs):
        seen.update(kwargs)
        return FakeData()

    monkeypatch.setattr(train_step, "instantiate", fake_instantiate)
    monkeypatch.setattr(train_step, "build_module", lambda cfg, tok, cmvn_path: type("M", (), {"model": None})())
    monkeypatch.setattr(train_step, "make_optimizer", lambda cfg, model: (None, None))
    cfg = OmegaConf.create({"data": {"_target_": "x"}, "features": {"window_type": "hann", "mel_banks": "librosa",
                                                                    "remove_dc_offset": False}})
    train_step.build_training(cfg)
    assert seen["features"] == run_features(cfg).to_dict()
    assert seen["features"]["mel_banks"] == "librosa"
