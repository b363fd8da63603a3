"""scripts/bench_train_step.py end to end on a tiny synthetic model: what it prints, what it refuses."""

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_train_step.py"
TINY = ["model.encoder.d_model=16", "model.encoder.num_heads=2", "model.encoder.num_layers=1",
        "model.encoder.ffn_dim=32", "model.decoder_layers=1", "model.decoder_ffn_dim=32", "data.max_duration=8"]


def _script():
    spec = importlib.util.spec_from_file_location("bench_train_step_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_synthetic_comparison_and_optimizer_table_print_their_tables(capsys):
    _script().main(["--synthetic", "30", "--compare", "eager", "--steps", "3", "--warmup", "1", "--optimizers",
                    "--threads", "1", *TINY])
    out = capsys.readouterr().out
    assert "synthetic batches of up to 8 s" in out
    rows = [line.split()[0] for line in out.splitlines() if line.split()[:1] in (["for-loop"], ["foreach"], ["fused"])]
    assert rows == ["for-loop", "foreach", "fused"]
    assert "3 batches, 1 warm-up steps per variant, interleaved" in out
    assert any(line.startswith("eager") for line in out.splitlines())


@pytest.mark.parametrize("argv, message", [
    (["--synthetic", "30", "--recompiles", "blocks", "--compare", "eager"], "--synthetic goes with --compare"),
    (["--synthetic", "30", "--profile"], "--synthetic goes with --compare"),
    (["--compare", "eager,jit"], "unknown variant"),
    ([], "choose --profile"),
])
def test_combinations_it_cannot_run_are_refused_before_anything_is_built(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        _script().parse_args(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err
