"""trainer.precision=auto: the probe, the choice, its file, and bf16 autocast's loss against float64."""

import json
import time

import pytest
import torch
from hydra import compose, initialize_config_dir

from asr.train.precision import (CHOICE_FILE, MIN_SPEEDUP, PrecisionChoice, probe_batch, read_choice,
                                 resolve_precision, time_steps)
from asr.train.run import format_summary, train

from helpers import VOCAB, random_batches, tiny_model
from tiny_corpus import CONF, make_tiny_corpus, tiny_overrides

CPU = {"accelerator": "cpu", "devices": 1, "num_nodes": 1}


def never(device: str) -> tuple[float, float]:
    raise AssertionError("the probe ran")


def test_a_set_precision_is_kept_without_a_probe(tmp_path):
    choice = resolve_precision("32-true", CPU, tmp_path, never)
    assert choice.precision == "32-true" and not (tmp_path / CHOICE_FILE).exists()
    assert resolve_precision("bf16-mixed", {**CPU, "devices": 4}, tmp_path, never).precision == "bf16-mixed"


@pytest.mark.parametrize("fp32_s, bf16_s, expected", [
    (0.30, 0.20, "bf16-mixed"),                    # 1.5x
    (0.30, 0.30 / MIN_SPEEDUP, "bf16-mixed"),      # at the threshold
    (0.30, 0.28, "32-true"),                       # 1.07x: within a busy host's spread
    (0.30, 0.45, "32-true"),                       # bf16 slower (emulated, or casts outweigh products)
])
def test_auto_follows_the_measured_speedup_and_stores_it(tmp_path, fp32_s, bf16_s, expected):
    choice = resolve_precision("auto", CPU, tmp_path, lambda device: (fp32_s, bf16_s))
    assert choice.precision == expected
    assert choice.fp32_ms == pytest.approx(1000 * fp32_s, abs=0.1)
    assert read_choice(tmp_path / CHOICE_FILE) == choice
    # the run folder's choice is read back (a resumed run keeps it) and the probe does not run again
    again = resolve_precision("auto", CPU, tmp_path, never)
    assert again.precision == expected and "earlier choice" in again.reason


def test_auto_measures_on_the_trainers_device(tmp_path):
    seen = []
    choice = resolve_precision("auto", CPU, tmp_path, lambda device: seen.append(device) or (0.3, 0.2))
    assert seen == ["cpu"] and "on cpu" in choice.reason
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA device"):
            resolve_precision("auto", {**CPU, "accelerator": "gpu"}, tmp_path / "gpu", never)
    with pytest.raises(ValueError, match="accelerator=mps"):
        resolve_precision("auto", {**CPU, "accelerator": "mps"}, tmp_path / "mps", never)


def test_auto_with_several_processes_is_refused(tmp_path):
    with pytest.raises(ValueError, match="devices=2"):
        resolve_precision("auto", {**CPU, "devices": 2}, tmp_path, never)
    with pytest.raises(ValueError, match="num_nodes=2"):
        resolve_precision("auto", {**CPU, "num_nodes": 2}, tmp_path, never)


@pytest.mark.parametrize("text", ["{not json", json.dumps({"precision": "16-mixed", "reason": "x"}),
                                  json.dumps({"precision": "32-true"}), json.dumps({"p": 1})])
def test_a_stored_choice_that_is_not_one_is_named(tmp_path, text):
    (tmp_path / CHOICE_FILE).write_text(text)
    with pytest.raises(ValueError, match=CHOICE_FILE):
        resolve_precision("auto", CPU, tmp_path, never)


def test_the_probe_leaves_the_model_and_the_global_rng_as_they_were():
    torch.manual_seed(3)
    model = tiny_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    state = torch.get_rng_state()
    batch = probe_batch(feat_dim=8, vocab_size=VOCAB, max_duration_s=2.0, utterance_s=0.5)
    assert batch[0].shape == (4, 50, 8) and batch[2].shape == (4, 1) and int(batch[2].max()) < VOCAB - 1
    fp32_s, bf16_s = time_steps(model, batch, repeats=2)
    assert fp32_s > 0 and bf16_s > 0
    assert torch.equal(torch.get_rng_state(), state)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())


class SleepsInFloat32(torch.nn.Module):
    """A model whose float32 pass waits 50 ms without computing: what another program on the cores does to the
    wall clock of the pass it interrupts."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(1))

    def forward(self, feats, feat_lens, tokens, token_lens):
        if not torch.is_autocast_enabled("cpu"):
            time.sleep(0.05)
        return {"loss": (self.weight * feats.float().mean()).sum()}


def test_the_cpu_probe_counts_the_process_cpu_time_not_the_wall_clock():
    batch = probe_batch(feat_dim=8, vocab_size=VOCAB, max_duration_s=2.0, utterance_s=0.5)
    fp32_s, bf16_s = time_steps(SleepsInFloat32(), batch, repeats=2)
    assert fp32_s < 0.025 and bf16_s < 0.025  # the 50 ms waits are not the model's


def test_bf16_autocast_loss_and_gradients_agree_with_float64():
    """What bf16-mixed trains on: the loss within bfloat16's rounding of the float64 loss, the gradient in
    the same direction (a cast in the wrong place, a loss reduced in bf16, shows here)."""
    torch.manual_seed(0)
    model = tiny_model().train()
    batch = random_batches(1, batch_size=4, frames=60)[0]
    args = (batch.feats, batch.feat_lens, batch.tokens, batch.token_lens)

    reference = model.double()
    loss64 = reference(args[0].double(), *args[1:])["loss"]
    loss64.backward()
    grad64 = torch.cat([p.grad.flatten() for p in reference.parameters() if p.grad is not None])
    reference.zero_grad(set_to_none=True)

    model = reference.float()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss16 = model(*args)["loss"]
    assert loss16.dtype == torch.float32  # the loss itself is reduced in float32
    loss16.backward()
    grad16 = torch.cat([p.grad.flatten().double() for p in model.parameters() if p.grad is not None])
    assert float(loss16) == pytest.approx(float(loss64), rel=0.02)
    assert torch.nn.functional.cosine_similarity(grad16, grad64, dim=0) > 0.99


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_tiny_corpus(tmp_path_factory.mktemp("corpus"))


def test_a_run_at_auto_records_its_choice_and_a_resume_keeps_it(corpus, tmp_path):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=[*tiny_overrides(corpus, tmp_path), "trainer.max_epochs=1",
                                          "trainer.precision=auto"])
    summary = train(cfg)
    stored = read_choice(tmp_path / CHOICE_FILE)
    assert summary["precision"] == stored.precision in ("32-true", "bf16-mixed")
    assert f"s at {stored.precision}" in format_summary(summary)
    assert stored.fp32_ms > 0 and stored.bf16_ms > 0
    # the other precision written as this folder's choice: a resumed run trains at it, without a probe
    other = "32-true" if stored.precision == "bf16-mixed" else "bf16-mixed"
    (tmp_path / CHOICE_FILE).write_text(json.dumps({**stored.__dict__, "precision": other}))
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=[*tiny_overrides(corpus, tmp_path), "trainer.max_epochs=2",
                                          "trainer.precision=auto", "resume=true"])
    resumed = train(cfg)
    assert resumed["precision"] == other and resumed["resumed_from"]
    assert isinstance(PrecisionChoice(**json.loads((tmp_path / CHOICE_FILE).read_text())), PrecisionChoice)
