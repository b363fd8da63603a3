"""Robustness benchmark: WER against SNR for babble, music, white and pink noise and reverberation,
on sentences alone (offline, the server's chunking) and in live sessions through scripts/serve.py.

The backgrounds are the benchmark's own (asr/bench/backgrounds.py), made apart from every training
generator: babble from flite voices reading sentences no corpus split draws, music and noise from
their own generators, rooms from their own image-source impulse responses. Every condition gets a
bootstrap interval and, alone, a paired interval for its difference from clean; in sessions, the
paired difference from the same sentences alone, finals per session, fused gaps and words inserted
by the background. Deterministic for --seed. Prints Markdown tables; --out-json writes the report
(scripts/quickstart.py runs a short one into <run dir>/decode/robust_test/robust.json for its robust rows).

Usage (from the repository root):
    python scripts/bench_robust.py --checkpoint exp/quickstart_rel_xl/checkpoints/avg3.ckpt \\
        --cuts data/synth/cuts_test.jsonl.gz --out-json data/results/robust.json
    python scripts/bench_robust.py --checkpoint CKPT --kinds babble,music --snrs 20,10 --sessions 0
    python scripts/bench_robust.py --checkpoint CKPT --server-args "--vad none"
    python scripts/bench_robust.py --checkpoint CKPT --lm data/synth/lm/4gram.arpa.gz   # every row with the LM
    python scripts/bench_robust.py --checkpoint CKPT --sessions 0 --out-json a.json --plot a.png

--plot draws WER against SNR per background (scripts/plot_robust.py draws several reports side by side).

Choosing a server option or a recipe by it: choose on dev sentences (--cuts data/synth/cuts_dev.jsonl.gz) with a
few --seed values, then read the choice once on test sentences with other seeds; a rule tuned on the sessions it
is read on reads better there than anywhere else (data/results/robust.md, Step 16).

--sessions 0 measures sentences alone only (minutes); sessions go through a child server on
127.0.0.1 (unpaced by default: WER and endpoints are decided on stream time), bounded by
--concurrency and --max-seconds.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from asr.bench.backgrounds import KINDS
    from asr.bench.live import SERVER_START_S
    from asr.bench.robust import RT60S_S, SNRS_DB
    from asr.decode.batch import MODES
    from asr.decode.options import add_checkpoint_argument, add_chunk_arguments, add_threads_argument
    from asr.lm.options import add_lm_arguments

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="\n\n".join(__doc__.split("\n\n")[1:]),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_checkpoint_argument(p)
    p.add_argument("--cuts", default="data/synth/cuts_test.jsonl.gz",
                   help="Lhotse manifest of the sentences (default data/synth/cuts_test.jsonl.gz)")
    p.add_argument("--data-dir", default=None, help="where the cuts' audio paths are relative to (default: their folder)")
    p.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated, of {', '.join(KINDS)} (default all)")
    p.add_argument("--snrs", type=_floats, default=SNRS_DB, help="SNRs in dB (default 20,10,5)")
    p.add_argument("--rt60s", type=_floats, default=RT60S_S, help="reverberation times in s (default 0.3,0.6,0.9)")
    p.add_argument("--utterances", type=int, default=60, help="sentences decoded alone (default 60)")
    p.add_argument("--sessions", type=int, default=12, help="live sessions per condition (default 12; 0: none)")
    p.add_argument("--sentences", type=int, default=5, help="sentences per session (default 5)")
    p.add_argument("--seed", type=int, default=0, help="backgrounds, rooms, session layouts")
    p.add_argument("--mode", choices=MODES, default="attention_rescoring", help="alone decoding mode "
                   "(default attention_rescoring, the server's)")
    add_chunk_arguments(p)
    add_lm_arguments(p)
    add_threads_argument(p)
    p.add_argument("--speed", type=float, default=0.0, help="session pace, times real time (default 0: unpaced)")
    p.add_argument("--concurrency", type=int, default=4, help="connections at once (default 4)")
    p.add_argument("--max-seconds", type=float, default=3600.0, help="wall-time cap on the sessions (default 3600)")
    p.add_argument("--server-start-s", type=float, default=SERVER_START_S,
                   help=f"seconds the server child may take to start (default {SERVER_START_S:g}; more on a "
                        "loaded machine)")
    p.add_argument("--server-args", default="", help='extra scripts/serve.py arguments, one string: "--vad none"')
    p.add_argument("--replicates", type=int, default=1000, help="bootstrap replicates (default 1000)")
    p.add_argument("--out-json", help="write the report here")
    p.add_argument("--plot", help="also draw WER against SNR per background into this PNG")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from asr.bench.report_cli import run_and_report
    from asr.bench.robust import RobustConfig, format_tables, run_robust
    from asr.decode.options import set_threads
    from asr.lm.options import lm_argv

    set_threads(args.threads)
    reports: list[dict] = []

    def run(log):
        config = RobustConfig(
            checkpoint=args.checkpoint, cuts=args.cuts, data_dir=args.data_dir,
            kinds=tuple(k.strip() for k in args.kinds.split(",") if k.strip()), snrs_db=args.snrs,
            rt60s_s=args.rt60s, utterances=args.utterances, sessions=args.sessions, sentences=args.sentences,
            seed=args.seed, mode=args.mode, chunk_size=args.chunk_size, left_chunks=args.left_chunks,
            speed=args.speed, concurrency=args.concurrency, server_args=tuple(shlex.split(args.server_args)),
            max_seconds=args.max_seconds, replicates=args.replicates, server_start_s=args.server_start_s,
            lm_args=tuple(lm_argv(args)))
        reports.append(run_robust(config, log=log))
        return reports[-1]

    code = run_and_report(run, format_tables, args.out_json)
    if code == 0 and args.plot:
        from asr.bench.robust_plot import plot_wer_against_snr

        written = plot_wer_against_snr([(Path(args.checkpoint).name, reports[0])], args.plot)
        print(f"plot: {written}" if written else "plot: not drawn (no background row)", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
