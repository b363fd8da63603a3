"""Benchmark chunk streaming of the Conformer encoder (+ a CTC head) for every position scheme.

Usage:
    python scripts/bench_streaming.py                      # all schemes, 60 s of audio, C=16, L=4
    python scripts/bench_streaming.py --schemes rel_xl shaw --seconds 120 --piece-ms 320
    python scripts/bench_streaming.py --hour               # + one hour of rel_xl with RSS sampling

Model: the quickstart encoder as ``conf/experiment/quickstart.yaml`` composes it
(sizes printed in the first line; ``--experiment`` picks another), each scheme with
its ``conf/pos_enc`` options, random weights and a random CTC linear head to a vocab
of 256. Input: random features at the fbank frame shift, fed in pieces of
``--piece-ms``. Reported per scheme, all measured in this run:

* RTF: streaming wall-clock compute time / audio duration (target <= 0.1), and
  cpu RTF: the process CPU time of the same run / audio duration (on a shared,
  oversubscribed machine the wall clock also counts time spent descheduled);
* per-chunk latency p50 / p95 / max: compute time of a stream_step call divided by
  the chunks it emitted (calls that emitted nothing are excluded);
* stream/full: streaming time over one full-context forward of the same audio.

``--hour`` streams one hour (L bounded) and prints process RSS and state size every
10 minutes of audio: both must stay flat after warm-up.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

# A streaming step is hundreds of small ops. With OpenMP's default spin-waiting, the
# worker threads of a shared, oversubscribed machine spend their time slices spinning
# at barriers (LayerNorm on one 16x144 chunk measured 27 us with 1 thread, 1.8 ms
# with 2 at load 7 on 2 cores). Passive waiting must be set before torch loads OpenMP.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from pathlib import Path  # noqa: E402

import torch  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from torch import nn  # noqa: E402

from asr.data.features import FRAME_SHIFT_S  # noqa: E402
from asr.decode.options import add_threads_argument  # noqa: E402
from asr.model import POSITION_SCHEMES, build_encoder  # noqa: E402

CONF = Path(__file__).resolve().parents[1] / "conf"


def rss_mib() -> float:
    """Resident set size of this process (Linux /proc)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def encoder_config(experiment: str, scheme: str) -> dict:
    """``build_encoder`` kwargs of ``experiment`` with ``scheme`` and its conf/pos_enc options."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=[f"experiment={experiment}", f"pos_enc={scheme}"])
    options = OmegaConf.to_container(cfg.pos_enc, resolve=True)
    return {**OmegaConf.to_container(cfg.model.encoder, resolve=True), "pos_enc": options.pop("name"), **options}


def build(scheme: str, args: argparse.Namespace, audio_s: float) -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    kwargs = encoder_config(args.experiment, scheme)
    if scheme == "abs_learned":  # a table just long enough for this audio (it has a hard limit)
        kwargs["max_len"] = int(audio_s / FRAME_SHIFT_S) // kwargs["subsampling"] + 1
    enc = build_encoder(**kwargs).eval()
    ctc = nn.Linear(enc.output_size, args.vocab).eval()
    return enc, ctc


def stream(enc, ctc, feats: torch.Tensor, args) -> tuple[float, float, list[float]]:
    """Stream ``feats`` (1, T, 80); return wall seconds, CPU seconds and per-chunk latencies."""
    piece = max(1, round(args.piece_ms / 1000 / FRAME_SHIFT_S))
    state = enc.init_state(1, args.chunk, args.left)
    norm = enc.online_cmn()  # a live frontend's running mean (when the experiment turns it on), timed with the step
    frontend = None if norm is None else norm.stream()
    total, latencies = 0.0, []
    cpu0 = time.process_time()
    for start in range(0, feats.size(1), piece):
        last = start + piece >= feats.size(1)
        t0 = time.perf_counter()
        new = feats[:, start : start + piece]
        if frontend is not None:
            new = frontend.push(new)
        out, state = enc.stream_step(new, state, final=last)
        if out.size(1):
            ctc(out).log_softmax(-1)
        dt = time.perf_counter() - t0
        total += dt
        chunks = -(-out.size(1) // args.chunk)
        if chunks:
            latencies.append(dt / chunks)
    return total, time.process_time() - cpu0, latencies


def full_forward(enc, ctc, feats: torch.Tensor) -> float:
    t0 = time.perf_counter()
    out, _ = enc(feats, torch.tensor([feats.size(1)]))
    ctc(out).log_softmax(-1)
    return time.perf_counter() - t0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def bench_schemes(args) -> None:
    model = encoder_config(args.experiment, args.schemes[0])
    frames = round(args.seconds / FRAME_SHIFT_S)
    feats = torch.randn(1, frames, model["input_dim"])
    sizes = ", ".join(f"{k} {model[k]}" for k in ("d_model", "num_heads", "num_layers", "ffn_dim", "conv_kernel",
                                                   "subsampling", "subsampling_channels", "causal"))
    print(f"{args.experiment} encoder: {sizes}")
    print(
        f"streaming C={args.chunk} L={args.left}, {args.seconds:.0f} s audio in {args.piece_ms} ms pieces, "
        f"torch threads={torch.get_num_threads()}, OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    header = f"{'scheme':<12}{'params':>9}{'RTF':>8}{'cpu RTF':>9}{'p50 ms':>9}{'p95 ms':>9}{'max ms':>9}{'full s':>8}{'stream/full':>13}"
    print(header)
    print("-" * len(header))
    for scheme in args.schemes:
        enc, ctc = build(scheme, args, args.seconds)
        params = sum(p.numel() for p in enc.parameters()) + sum(p.numel() for p in ctc.parameters())
        with torch.inference_mode():
            stream(enc, ctc, feats[:, :1000], args)  # warm-up: allocator, kernels
            full_forward(enc, ctc, feats[:, :1000])
            total, cpu, lat = stream(enc, ctc, feats, args)
            full = full_forward(enc, ctc, feats)
        print(
            f"{scheme:<12}{params / 1e6:>8.2f}M{total / args.seconds:>8.3f}{cpu / args.seconds:>9.3f}"
            f"{1000 * statistics.median(lat):>9.1f}{1000 * percentile(lat, 0.95):>9.1f}{1000 * max(lat):>9.1f}"
            f"{full:>8.2f}{total / full:>13.2f}"
        )


def bench_hour(args) -> None:
    scheme = args.schemes[0]
    enc, ctc = build(scheme, args, 3600.0)
    piece = round(args.piece_ms / 1000 / FRAME_SHIFT_S)
    hour_frames = round(3600 / FRAME_SHIFT_S)
    report_every = round(600 / FRAME_SHIFT_S)
    state = enc.init_state(1, args.chunk, args.left)
    norm = enc.online_cmn()
    frontend = None if norm is None else norm.stream()  # its sums are (F,): the stream must not grow here either
    print(f"one hour of {scheme}, C={args.chunk} L={args.left}, {args.piece_ms} ms pieces")
    print(f"{'audio min':>10}{'RSS MiB':>10}{'state KiB':>11}{'RTF so far':>12}")
    torch.manual_seed(1)
    busy, fed = 0.0, 0
    with torch.inference_mode():
        while fed < hour_frames:
            feats = torch.randn(1, piece, enc.input_dim)  # generated per piece: the stream itself must not grow
            t0 = time.perf_counter()
            if frontend is not None:
                feats = frontend.push(feats)
            out, state = enc.stream_step(feats, state)
            if out.size(1):
                ctc(out).log_softmax(-1)
            busy += time.perf_counter() - t0
            fed += piece
            if fed % report_every < piece or fed == piece or fed >= hour_frames:
                audio_s = fed * FRAME_SHIFT_S
                print(f"{audio_s / 60:>10.1f}{rss_mib():>10.1f}{state.nbytes() / 1024:>11.1f}{busy / audio_s:>12.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--schemes", nargs="+", default=list(POSITION_SCHEMES), choices=POSITION_SCHEMES)
    parser.add_argument("--experiment", default="quickstart", help="conf/experiment whose encoder is measured")
    parser.add_argument("--seconds", type=float, default=60.0, help="audio length per scheme")
    parser.add_argument("--piece-ms", type=int, default=640, help="feature piece fed per stream_step call")
    parser.add_argument("--chunk", type=int, default=16, help="chunk size C in encoder frames")
    parser.add_argument("--left", type=int, default=4, help="left chunks L (-1 = unlimited)")
    parser.add_argument("--vocab", type=int, default=256, help="CTC head output size")
    # A fixed count, not torch's default: timings compare across runs and hosts.
    add_threads_argument(parser, default=2)
    parser.add_argument("--hour", action="store_true", help="also stream one hour of the first scheme, sampling RSS")
    parser.add_argument("--skip-table", action="store_true", help="with --hour: only the hour run")
    args = parser.parse_args()
    if args.seconds <= 10 or args.piece_ms <= 0 or args.chunk <= 0:
        parser.error(f"need --seconds > 10 ({args.seconds}), --piece-ms > 0 ({args.piece_ms}), --chunk > 0 ({args.chunk})")
    torch.set_num_threads(args.threads)
    if not args.skip_table:
        bench_schemes(args)
    if args.hour:
        bench_hour(args)


if __name__ == "__main__":
    main()
