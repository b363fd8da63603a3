"""The plan for one command on a lent GPU (``scripts/gpu_check.py --lease``), and its tiny CPU twin.

A lent device runs one command for at most 10 minutes of a 15-minute lease, so the plan is sized
for about 9 (:data:`LEASE_BUDGET_MINUTES`): each step has its own time cap, and the runner
(``asr.cli.gpu_check.run_plan``) cuts a step at its cap or at what is left of the whole budget,
whichever comes first, so a slow step cannot eat the lease. Steps, in order:

  env          versions, the card (nvidia-smi);
  cuda_tests   the model, streaming and training tests whose ``device`` fixture is cuda (the fused
               attention kernels' forward and backward against float64 among them);
  attention    scripts/bench_attention.py --device cuda, fp32 and bf16, L = 512, 1024, 2048; then
               rel_xl's routes (flex, sdpa_bias, joint_sdpa) in bf16 at L = 4096 and 8192;
  throughput   the LibriSpeech-sized model (54 M parameters), bf16, synthetic duration-bucketed
               batches padded to a few lengths: eager against compiled blocks, interleaved, with
               the compiled variant's warm-up (compile) time and graph count;
  peers        scripts/bench_peers.py: ours beside Wenet's ASRModel and ESPnet's encoder at equal
               size on the same batches (audio seconds per second, peak memory, GPU busy share);
  lookahead    the same model's eager step with chunk lookahead r = 4 and r = 0 (chunked batches only);
  sync         the training step under ``torch.cuda.set_sync_debug_mode``: no sync but ATen's CTC;
  quickstart   the quickstart recipe trained on one GPU, only where its corpus exists (it does not
               travel to a lent device: 1 GB), in what is left of the budget.

``tiny=True`` is the same plan on the CPU with tiny sizes (the throughput and lookahead steps on the
quickstart recipe shrunk to one block of width 16, eager only: inductor takes minutes on a CPU; a
quick test file for the cuda tests): it checks that every command still runs and measures nothing
(``tests/scripts/test_gpu_lease.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from asr.cli.gpu_steps import Step

PY = sys.executable
LEASE_BUDGET_MINUTES = 9.0
WENET_SRC = ".whl/wenet_src"  # where --fetch-wheels exports Wenet's source, carried with the wheels
QUICKSTART_DATA = "data/synth"
# The quickstart recipe shrunk to a width-16 block: the tiny plan's model.
TINY_MODEL = ("model.encoder.d_model=16", "model.encoder.num_heads=2", "model.encoder.num_layers=1",
              "model.encoder.ffn_dim=32", "model.decoder_layers=1", "model.r2l_decoder_layers=0",
              "model.reverse_weight=0.0", "model.decoder_ffn_dim=32")


# rel_xl's routes at long lengths: the dense (C, K) bias of flex and sdpa_bias against joint_sdpa's none.
LONG_ATTENTION_ROWS = ("rel_xl/flex", "rel_xl/sdpa_bias", "rel_xl/joint_sdpa", "wenet_rel/joint_sdpa")


def attention_commands(out: Path, device: str = "cuda", tiny: bool = False) -> tuple[tuple[str, ...], ...]:
    """bench_attention.py in fp32 and bf16 at L = 512, 1024, 2048, JSON into ``out``, then rel_xl's routes in
    bf16 at L = 4096 and 8192 with peak memory, into the log only (a lease returns few files); tiny: fp32 at
    L = 32, once each (no flex rows: compiling flex on a CPU takes minutes)."""
    if tiny:
        long_rows = [row for row in LONG_ATTENTION_ROWS if not row.endswith("/flex")]
        return ((PY, "scripts/bench_attention.py", "--device", device, "--dtype", "float32", "--lengths", "32",
                 "--repeats", "1", "--no-peak", "--json", str(out / "attention_float32.json")),
                (PY, "scripts/bench_attention.py", "--device", device, "--lengths", "32", "--repeats", "1",
                 "--no-peak", "--rows", *long_rows))
    return (*(
        (PY, "scripts/bench_attention.py", "--device", device, "--dtype", dtype, "--lengths", "512", "1024", "2048",
         "--json", str(out / f"attention_{dtype}.json"))
        for dtype in ("float32", "bfloat16")
    ), (PY, "scripts/bench_attention.py", "--device", device, "--dtype", "bfloat16", "--lengths", "4096", "8192",
        "--repeats", "2", "--rows", *LONG_ATTENTION_ROWS))


def throughput_command(variants: str, steps: int, warmup: int, *extra: str, device: str = "cuda",
                       tiny: bool = False) -> tuple[str, ...]:
    """bench_train_step.py --compare on synthetic batches: the LibriSpeech-sized model in bf16 on the GPU, or
    (tiny) the shrunk quickstart model in fp32 on the CPU; ``extra``: flags and Hydra overrides."""
    if tiny:
        return (PY, "scripts/bench_train_step.py", "--compare", variants, "--synthetic", "30", "--device", device,
                "--steps", str(steps), "--warmup", str(warmup), "--threads", "1", *extra, "experiment=quickstart",
                "data.max_duration=4", *TINY_MODEL)
    return (PY, "scripts/bench_train_step.py", "--compare", variants, "--synthetic", "5000", "--device", device,
            "--precision", "bf16", "--steps", str(steps), "--warmup", str(warmup), *extra,
            "experiment=librispeech_u2pp", "trainer=gpu")


def lease_plan(out: Path, tiny: bool = False) -> list[Step]:
    """The lease's steps (module docstring); ``tiny``: on the CPU, small sizes and caps."""
    device = "cpu" if tiny else "cuda"
    cap = (lambda gpu_s: 240) if tiny else (lambda gpu_s: gpu_s)  # tiny: a guard against hangs on a busy host
    tests = ((PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/data/test_buckets.py"),) if tiny else (
        (PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "cuda", "--timeout", "120",
         "tests/model", "tests/streaming", "tests/train"),)
    sync = (PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "not cuda" if tiny else "cuda",
            "tests/train/test_step_sync.py")
    peers = (PY, "scripts/bench_peers.py", "--device", device, "--wenet-src", WENET_SRC,
             *(("--size", "tiny", "--batches", "1", "--rounds", "1", "--max-duration", "2", "--threads", "1")
               if tiny else ("--size", "librispeech", "--precision", "bf16", "--batches", "6", "--rounds", "2",
                             "--max-duration", "300", "--seconds", "2", "16")))
    # Chunked batches only (streaming.p_full=0), the same draws in both runs: what lookahead changes.
    steps, warmup = (2, 1) if tiny else (12, 3)
    lookahead = tuple(throughput_command("eager", steps, warmup, "streaming.p_full=0",
                                         f"model.encoder.chunk_lookahead={r}", device=device, tiny=tiny)
                      for r in (0, 4))
    # Tiny: eager alone (inductor takes minutes on a CPU); the padding and the step log still run.
    throughput = throughput_command("eager" if tiny else "eager,blocks", *((3, 1) if tiny else (16, 6)),
                                    "--pad-buckets", "4", "--log-steps", device=device, tiny=tiny)
    quickstart = (PY, "scripts/quickstart.py", "--data-dir", QUICKSTART_DATA, "--run-dir", str(out / "quickstart"),
                  "trainer=gpu", "trainer.precision=32")
    return [
        Step("env", "versions and the card", ((PY, "scripts/gpu_check.py", "--env"),
                                              *(() if tiny else (("nvidia-smi",),))), cap(20)),
        Step("cuda_tests", "the tests whose device fixture is cuda (fused attention against float64 included)"
             if not tiny else "a quick test file (the tiny plan has no cuda tests)", tests, cap(110)),
        Step("attention", "attention cores, fp32 and bf16, ratios to flash SDPA",
             attention_commands(out, device, tiny), cap(110)),
        Step("throughput", "LibriSpeech-sized model, bf16, bucket-padded synthetic batches, eager vs compiled "
             "blocks (warm-up = compile time)", (throughput,), cap(130)),
        Step("peers", "ours beside Wenet's ASRModel and ESPnet's encoder at equal size, same batches",
             (peers,), cap(80)),
        Step("lookahead", "chunked steps with chunk lookahead r = 0, then r = 4", lookahead, cap(60)),
        Step("sync", "the training step under torch.cuda.set_sync_debug_mode: no sync but ATen's CTC", (sync,),
             cap(30)),
        Step("quickstart", "the quickstart recipe on one GPU (fp32: its small model steps faster so)",
             (quickstart,), cap(540), requires=QUICKSTART_DATA if not tiny else "data/no_corpus_in_the_tiny_plan"),
    ]
