"""Benchmark the attention core of every position scheme against plain SDPA.

Usage:
    python scripts/bench_attention.py [--quick] [--json PATH] [--threads N] [--repeats R]
    python scripts/bench_attention.py --lengths 512 1024 4096 --repeats 5   # the blocked path's range
    python scripts/bench_attention.py --device cuda --dtype bfloat16 --lengths 512 1024 2048
    python scripts/bench_attention.py --quick --lengths 128 --no-peak --no-flex   # a short CPU run
    python scripts/bench_attention.py --device cuda --lengths 8192 --rows rel_xl/flex rel_xl/joint_sdpa
    python scripts/bench_attention.py --shape 1 4 36 --lengths 2000 --forward --rows rel_xl/blocked rel_xl/joint_sdpa

For each scheme and length L (B=8, H=4, Dh=64; L in 128, 256, 512, 1024, or 128,
256 with --quick) this measures, for one forward + backward of the scorer
(q, k, v given with requires_grad, no mask; the scheme's own positional
projections and tables included). A scheme's row is what the model runs at that
size (``asr.model.scorers.blocked.use_blocked`` picks the explicit or the blocked
path); the ``<scheme>/blocked`` rows force the exact blocked attention
(``blocked.forced()``) for the schemes that have it; the ``<scheme>/<route>`` rows force each
fused attention route the scheme has (``asr.model.scorers.routes``: ``flex``, ``sdpa_bias``,
``joint_sdpa``; on CUDA a scheme's own row is its default route, and ``<scheme>/explicit`` forces
the explicit path for comparison). FlexAttention has no backward on the CPU: there its rows time
the forward alone, against SDPA's forward alone (the ``sdpa/fwd`` row), and save nothing
(``shaw/flex`` needs flex's log-sum-exp, which the CPU kernel lacks: CUDA only); compiling it on
the CPU takes minutes (``--no-flex`` leaves those rows out):

* time: the median over repeats of (scheme time / SDPA time), where each repeat
  times every scheme and the baseline back to back (interleaved, best of 3 runs
  each), so load from other processes hits both sides of a ratio alike. The
  clock is this process's CPU time by default (``--clock cpu``): on a shared,
  oversubscribed machine wall time mostly measures when we were descheduled.
  With several threads CPU time also counts OpenMP spin-waits, so a path made of
  many kernels (every explicit-logit scheme) pays more for contention than the
  single fused SDPA kernel; the load average is printed with the table;
* saved: bytes kept for backward, summed over distinct storages seen by
  ``torch.autograd.graph.saved_tensors_hooks`` (a tensor saved by two ops counts
  once), plus the largest saved tensor; the script fails if any saved tensor
  holds L*L*Dh elements or more (Shaw's naive (L, L, Dh) tables) at L > B*H (below it the
  inputs themselves are that large);
* peak: resident-memory growth during one forward + backward in a fresh
  subprocess per config: the kernel's high-water mark (VmHWM, reset through
  /proc/self/clear_refs just before the step) minus the resident size before it.
  torch's CPU allocator returns big blocks to the OS, so this is the real working
  set of the step; tracemalloc cannot see torch's memory.

The baseline is ``F.scaled_dot_product_attention(q, k, v)`` without mask or
positions (the fused CPU flash kernel; on a GPU, flash attention). All numbers are
printed as ratios to it. ``--device cuda`` times on the GPU (wall clock, synchronized;
``--dtype bfloat16`` for the bf16 recipe) and reports the CUDA allocator's peak instead
of RSS; the CPU targets do not apply there.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asr.model.positions import POSITION_SCHEMES, build_position_scheme  # noqa: E402
from asr.model.scorers import blocked  # noqa: E402
from asr.model.scorers.routes import EXPLICIT, FLEX, FUSED_ROUTES, forced_route  # noqa: E402
from asr.decode.options import add_threads_argument  # noqa: E402

B, H, DH = 8, 4, 64
BASELINE = "sdpa"
# (scheme, max L) -> largest allowed time ratio against SDPA: the explicit path's budget.
TARGETS = {("rel_xl", 256): 2.1, ("rel_xl", 512): 3.0, ("shaw", 256): 1.8, ("shaw", 512): 2.6}
# Goals of the blocked path, printed after the table, not failed on: (row, L, kind) -> ratio.
GOALS = {("rel_xl/blocked", 512, "time"): 2.2, ("shaw/blocked", 512, "time"): 2.2,
         ("rel_xl/blocked", 1024, "saved"): 1.5, ("shaw/blocked", 1024, "saved"): 1.5}
BLOCKED_SUFFIX = "/blocked"
BASELINE_FORWARD = "sdpa/fwd"


def target_for(name: str, length: int) -> float | None:
    for (scheme, max_len), limit in sorted(TARGETS.items(), key=lambda kv: kv[0][1]):
        if scheme == name and length <= max_len:
            return limit
    return None


# Where and in what dtype the cores run (--device, --dtype); FORWARD: forward passes alone (--forward).
DEVICE, DTYPE = torch.device("cpu"), torch.float32
FORWARD = False


def make_core(name: str):
    """A callable (q, k, v) -> out for one row: SDPA, a scheme's scorer as the model runs it,
    ``<scheme>/blocked`` (its blocked path) or ``<scheme>/<route>`` (that attention route forced)."""
    if name in (BASELINE, BASELINE_FORWARD):
        return lambda q, k, v: F.scaled_dot_product_attention(q, k, v)
    scheme, _, variant = name.partition("/")
    scorer = build_position_scheme(scheme, H * DH, H).make_scorer(H, DH, 0.0).to(DEVICE, DTYPE)
    if variant == BLOCKED_SUFFIX[1:]:
        def run(q, k, v):
            with forced_route(EXPLICIT), blocked.forced():
                return scorer(q, k, v, None)
        return run
    if variant:
        def run_route(q, k, v):
            with forced_route(variant):
                return scorer(q, k, v, None)
        return run_route
    return lambda q, k, v: scorer(q, k, v, None)


def blocked_rows() -> list[str]:
    """``<scheme>/blocked`` for every scheme whose scorer has the blocked path."""
    return [f"{name}{BLOCKED_SUFFIX}" for name in POSITION_SCHEMES
            if build_position_scheme(name, H * DH, H).make_scorer(H, DH, 0.0).has_blocked_path]


def route_rows(flex: bool) -> list[str]:
    """``<scheme>/<route>`` for every fused route (``flex`` False: without the flex ones), and on CUDA
    ``<scheme>/explicit`` for the schemes that have one."""
    rows = []
    for name in POSITION_SCHEMES:
        routes = [route for route in FUSED_ROUTES.get(name, ()) if flex or route != FLEX]
        if DEVICE.type == "cpu" and name == "shaw":  # its flex route needs the log-sum-exp: not compiled on the CPU
            routes = [route for route in routes if route != FLEX]
        if routes and DEVICE.type == "cuda":
            rows.append(f"{name}/{EXPLICIT}")
        rows += [f"{name}/{route}" for route in routes]
    return rows


def forward_only(name: str) -> bool:
    """Rows timed without a backward: every row with --forward, else FlexAttention on the CPU and their
    SDPA baseline."""
    return FORWARD or name == BASELINE_FORWARD or (DEVICE.type == "cpu" and name.endswith(f"/{FLEX}"))


def make_inputs(length: int) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(0)
    return tuple(torch.randn(B, H, length, DH, generator=gen).to(DEVICE, DTYPE).requires_grad_() for _ in range(3))


def step(core, inputs, backward: bool = True) -> None:
    """One forward + backward (``backward`` False: the forward alone, without autograd); grads
    cleared so accumulation does not add a pass."""
    if not backward:
        with torch.no_grad():  # detached too: flex on the CPU refuses inputs that require grad at all
            core(*(t.detach() for t in inputs))
        return
    for t in inputs:
        t.grad = None
    out = core(*inputs)
    out.backward(torch.ones_like(out))


def saved_tensor_stats(core, inputs) -> tuple[int, int, tuple[int, ...]]:
    """(bytes saved over distinct storages, largest saved numel, its shape)."""
    storages: dict[int, int] = {}
    largest: tuple[int, tuple[int, ...]] = (0, ())

    def pack(t: torch.Tensor):
        nonlocal largest
        storage = t.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        if t.numel() > largest[0]:
            largest = (t.numel(), tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = core(*inputs)
    out.backward(torch.ones_like(out))
    return sum(storages.values()), largest[0], largest[1]


def saved_stats_or_failure(name: str, length: int, failures: list[str]) -> tuple[int, int, tuple[int, ...]]:
    """:func:`saved_tensor_stats` of a row ((0, 0, ()) for a forward-only one); a row whose hooks fail
    (a compiled kernel under ``saved_tensors_hooks``) is listed in ``failures`` and counts as 0,
    so the timings of the other rows still print."""
    if forward_only(name):
        return 0, 0, ()
    try:
        return saved_tensor_stats(make_core(name), make_inputs(length))
    except RuntimeError as err:
        failures.append(f"{name} L={length}: saved-tensor count failed: {str(err).splitlines()[0]}")
        return 0, 0, ()


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def peak_rss_child(name: str, length: int, threads: int) -> float:
    """MiB of resident-memory growth for one fwd+bwd, measured in this (fresh) process."""
    torch.set_num_threads(threads)
    core = make_core(name)
    step(core, make_inputs(16), not forward_only(name))  # load kernels and thread pools before the baseline
    inputs = make_inputs(length)
    # Reset the high-water mark (Linux clear_refs "5") so the import's peak does
    # not hide ours; fall back to ru_maxrss where that is not allowed.
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        before, read_peak = _status_kib("VmRSS"), lambda: _status_kib("VmHWM")
    except OSError:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        read_peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # noqa: E731
    step(core, inputs, not forward_only(name))
    return (read_peak() - before) / 1024.0


def peak_cuda(name: str, length: int) -> float:
    """MiB the CUDA allocator's peak grows by during one fwd+bwd."""
    core, inputs = make_core(name), make_inputs(length)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step(core, inputs, not forward_only(name))
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - before) / 2**20


def peak_rss(name: str, length: int, threads: int) -> float:
    if DEVICE.type == "cuda":
        return peak_cuda(name, length)
    cmd = [sys.executable, __file__, "--child", name, str(length), "--threads", str(threads),
           "--shape", str(B), str(H), str(DH), *(["--forward"] if FORWARD else [])]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return float(out.strip().splitlines()[-1])


def _synchronized_wall() -> float:
    torch.cuda.synchronize()
    return time.perf_counter()


CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter, "cuda": _synchronized_wall}


def time_ratios(
    names: list[str], length: int, repeats: int, clock: str, inner: int = 3
) -> dict[str, dict[str, float]]:
    """Interleaved timing; per repeat, each scheme's best-of-``inner`` time is divided by
    that repeat's SDPA time, and the ratio reported is the median over repeats."""
    cores = {n: make_core(n) for n in names}
    inputs = make_inputs(length)
    for n, core in cores.items():  # warm-up (allocator, kernels, cached tables, compiles)
        step(core, inputs, not forward_only(n))
    now = CLOCKS[clock]
    times: dict[str, list[float]] = {n: [] for n in names}
    for rep in range(repeats):
        # Rotate the order so no scheme always runs right after the same neighbour.
        order = names[rep % len(names) :] + names[: rep % len(names)]
        for n in order:
            # Min of a few back-to-back runs: preemption by other processes only adds time.
            best = float("inf")
            for _ in range(inner):
                start = now()
                step(cores[n], inputs, not forward_only(n))
                best = min(best, now() - start)
            times[n].append(best)
    return {
        n: {
            "ms": 1e3 * statistics.median(ts),
            "ratio": statistics.median(
                t / b for t, b in zip(ts, times[BASELINE_FORWARD if forward_only(n) else BASELINE])),
        }
        for n, ts in times.items()
    }


def main() -> int:
    global DEVICE, DTYPE, B, H, DH, FORWARD
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="L in 128, 256 only")
    parser.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    # A fixed count, not torch's default: timings compare across runs and hosts.
    add_threads_argument(parser, default=2)
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu", help="timer (default: process CPU time)")
    parser.add_argument("--repeats", type=int, default=0, help="timed repeats (default 9, 5 with --quick)")
    parser.add_argument("--lengths", type=int, nargs="*", help="override the lengths")
    parser.add_argument("--no-peak", action="store_true", help="skip the per-config subprocess peak memory")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where to run (cuda: wall clock)")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--no-flex", action="store_true", help="leave out the flex route rows (slow to compile on the CPU)")
    parser.add_argument("--rows", nargs="+", metavar="ROW", help="only these rows (beside the SDPA baseline), "
                        "e.g. rel_xl rel_xl/flex rel_xl/joint_sdpa")
    parser.add_argument("--shape", nargs=3, type=int, metavar=("B", "H", "DH"), default=(B, H, DH),
                        help=f"batch, heads and head dim (default {B} {H} {DH})")
    parser.add_argument("--forward", action="store_true", help="time and measure forward passes alone (decoding)")
    parser.add_argument("--child", nargs=2, metavar=("SCHEME", "L"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.threads <= 0:
        parser.error(f"--threads must be >= 1, got {args.threads}")
    if min(args.shape) <= 0:
        parser.error(f"--shape needs positive sizes, got {args.shape}")
    (B, H, DH), FORWARD = args.shape, args.forward
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here")
    DEVICE, DTYPE = torch.device(args.device), getattr(torch, args.dtype)
    if args.device == "cuda":
        args.clock = "cuda"
    torch.set_num_threads(args.threads)
    if args.child:
        print(peak_rss_child(args.child[0], int(args.child[1]), args.threads))
        return 0

    lengths = args.lengths or ([128, 256] if args.quick else [128, 256, 512, 1024])
    repeats = args.repeats or (5 if args.quick else 9)
    names = [BASELINE, *POSITION_SCHEMES, *blocked_rows(), *route_rows(flex=not args.no_flex)]
    if args.rows:
        unknown = sorted(set(args.rows) - set(names))
        if unknown:
            parser.error(f"--rows: unknown {unknown}; the rows here are {names[1:]}")
        names = [BASELINE, *[n for n in names if n in args.rows]]
    if any(forward_only(n) for n in names):
        names.insert(1, BASELINE_FORWARD)
    rows, failures = [], []
    print(
        f"B={B} H={H} Dh={DH} device={args.device} dtype={args.dtype} threads={args.threads} repeats={repeats} clock={args.clock} "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; ratios are to plain SDPA (no mask)"
    )
    header = f"{'L':>5} {'scheme':<20} {'fwd ms' if FORWARD else 'fwd+bwd ms':>10} {'time x':>7} {'target':>7} {'saved MiB':>9} {'saved x':>8} {'largest saved':>22} {'peak MiB':>8} {'peak x':>7}"
    goals = []
    for length in lengths:
        # One run a repeat past 1024 (a step of L = 4096 takes seconds); the best of 3 below.
        timing = time_ratios(names, length, repeats, args.clock, inner=3 if length <= 1024 else 1)
        stats = {n: saved_stats_or_failure(n, length, failures) for n in names}
        peaks = {n: (float("nan") if args.no_peak else peak_rss(n, length, args.threads)) for n in names}
        print(header)
        for n in names:
            saved, largest, shape = stats[n]
            # Below L = B*H the inputs themselves, (B, H, L, Dh), reach L*L*Dh elements: nothing to tell.
            if length > B * H and largest >= length * length * DH:
                failures.append(f"{n} L={length}: saved tensor {shape} has >= L*L*Dh elements")
            limit = target_for(n, length) if (DEVICE.type, DTYPE) == ("cpu", torch.float32) else None
            ratio = timing[n]["ratio"]
            verdict = "" if limit is None else ("ok" if ratio <= limit else "MISS")
            if verdict == "MISS":
                failures.append(f"{n} L={length}: time ratio {ratio:.2f} > target {limit}")
            row = {
                "L": length, "scheme": n, "ms": timing[n]["ms"], "time_ratio": ratio, "target": limit,
                "saved_bytes": saved, "saved_ratio": saved / stats[BASELINE][0],
                "largest_saved_shape": list(shape), "peak_mib": peaks[n],
                "peak_ratio": peaks[n] / peaks[BASELINE] if peaks[BASELINE] > 0 else float("nan"),
            }
            rows.append(row)
            for kind, measured in (("time", ratio), ("saved", row["saved_ratio"])):
                goal = GOALS.get((n, length, kind))
                if goal is not None:
                    goals.append(f"goal {n} L={length} {kind} <= {goal}x: {measured:.2f}x "
                                 f"{'met' if measured <= goal else 'NOT met'}")
            print(
                f"{length:>5} {n:<20} {row['ms']:>10.1f} {ratio:>7.2f} {(f'{limit} ' + verdict) if limit else '':>7} "
                f"{saved / 2**20:>9.1f} {row['saved_ratio']:>8.2f} {str(shape):>22} {peaks[n]:>8.1f} {row['peak_ratio']:>7.2f}"
            )
        print()
    print(f"no saved tensor of L*L*Dh elements: {'yes' if not any('saved' in f for f in failures) else 'NO'}")
    for line in goals:
        print(line)
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    if args.json:
        with open(args.json, "w") as fh:
            meta = {"B": B, "H": H, "Dh": DH, "threads": args.threads, "repeats": repeats, "clock": args.clock}
            json.dump({**meta, "rows": rows}, fh, indent=1)
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
