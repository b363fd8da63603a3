"""scripts/bench_train_step.py (asr/bench/train_step_run.py) end to end on a tiny synthetic model: what it
prints, what it refuses."""

import subprocess
import sys
from pathlib import Path

import pytest

from asr.bench.train_step_run import TrainStepBench, run_train_step_bench

ROOT = Path(__file__).resolve().parents[2]
TINY = ("model.encoder.d_model=16", "model.encoder.num_heads=2", "model.encoder.num_layers=1",
        "model.encoder.ffn_dim=32", "model.decoder_layers=1", "model.decoder_ffn_dim=32", "data.max_duration=8")


def test_synthetic_comparison_and_optimizer_table_print_their_tables(capsys):
    run_train_step_bench(TrainStepBench(synthetic=30, compare="eager,eager-bf16", steps=3, warmup=1, optimizers=True,
                                        threads=1, overrides=TINY))
    out = capsys.readouterr().out
    assert "synthetic batches of up to 8 s" in out
    rows = [line.split()[0] for line in out.splitlines() if line.split()[:1] in (["for-loop"], ["foreach"], ["fused"])]
    assert rows == ["for-loop", "foreach", "fused"]
    assert "3 batches, 1 warm-up steps per variant, interleaved" in out
    assert any(line.startswith("eager") for line in out.splitlines())
    assert any(line.startswith("eager-bf16") for line in out.splitlines())  # with its ratio to float32


@pytest.mark.parametrize("options, message", [
    (dict(synthetic=30, recompiles="blocks", compare="eager"), "--synthetic goes with --compare"),
    (dict(synthetic=30, profile=True), "--synthetic goes with --compare"),
    (dict(compare="eager,jit"), "unknown variant"),
    (dict(), "choose --profile"),
])
def test_combinations_it_cannot_run_are_refused_before_anything_is_built(options, message):
    with pytest.raises(ValueError, match=message):
        TrainStepBench(**options)


def test_the_script_refuses_them_with_a_usage_error():
    done = subprocess.run([sys.executable, "scripts/bench_train_step.py", "--synthetic", "30", "--profile"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--synthetic goes with --compare" in done.stderr


def test_a_bf16_variant_steps_under_autocast_beside_its_float32_twin():
    from asr.bench.train_step import variant_parts
    assert variant_parts("eager") == ("eager", False) and variant_parts("blocks-bf16") == ("blocks", True)
    with pytest.raises(ValueError, match="optionally with -bf16"):
        variant_parts("eager-fp16")
