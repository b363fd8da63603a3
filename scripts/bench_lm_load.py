"""Loading a large n-gram LM: our ARPA reader (Python dictionaries) against KenLM, time and peak RSS.

Writes a synthetic word trigram ARPA of about 10 M n-grams (asr/bench/large_arpa.py; ~250 MB, kept
and reused), then loads it in fresh child processes, KenLM first and last with ours in between,
and prints wall and CPU seconds and each child's peak resident memory, and checks that both
backends give the same log-probabilities for a few n-grams (1e-4).

Usage:
    python scripts/bench_lm_load.py --arpa /tmp/large_3gram.arpa
    python scripts/bench_lm_load.py --arpa /tmp/small.arpa --bigrams 300000 --trigrams 700000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from asr.bench.large_arpa import write_large_arpa  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arpa", required=True, help="the ARPA file (written first when missing)")
    parser.add_argument("--vocab", type=int, default=50_000)
    parser.add_argument("--bigrams", type=int, default=3_000_000)
    parser.add_argument("--trigrams", type=int, default=7_000_000)
    parser.add_argument("--skip-ours", action="store_true", help="KenLM only (ours needs a few GB)")
    return parser.parse_args(argv)


def load_in_child(backend: str, path: Path) -> dict:
    result = subprocess.run([sys.executable, "-m", "asr.bench.large_arpa", "load", backend, str(path)],
                            capture_output=True, text=True, cwd=ROOT, env=None)
    if result.returncode != 0:
        raise RuntimeError(f"{backend} failed: {result.stderr.strip().splitlines()[-1:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    path = Path(args.arpa)
    if not path.is_file():
        print(f"writing {path} ...", flush=True)
        sizes = write_large_arpa(path, args.vocab, args.bigrams, args.trigrams)
        print(f"n-grams by order {sizes} ({sum(sizes.values()):,} in all), {path.stat().st_size / 2**20:.0f} MiB",
              flush=True)
    order = ["kenlm"] if args.skip_ours else ["kenlm", "ours", "kenlm"]
    runs = []
    for backend in order:
        print(f"loading with {backend} ...", flush=True)
        runs.append(load_in_child(backend, path))
    print(f"\n{path} ({path.stat().st_size / 2**20:.0f} MiB)\n")
    print("| backend | load wall s | load CPU s | peak RSS MiB |")
    print("|---|---|---|---|")
    for run in runs:
        print(f"| {run['backend']} | {run['load_s']:.1f} | {run['load_cpu_s']:.1f} | {run['peak_rss_mb']:.0f} |")
    if not args.skip_ours:
        ours = next(r for r in runs if r["backend"] == "ours")
        kenlm = [r for r in runs if r["backend"] == "kenlm"]
        same = all(abs(a - b) < 1e-4 for a, b in zip(ours["probes"], kenlm[0]["probes"]))
        best = min(kenlm, key=lambda r: r["load_cpu_s"])
        print(f"\nours / KenLM: load CPU {ours['load_cpu_s'] / best['load_cpu_s']:.1f}x, peak RSS "
              f"{ours['peak_rss_mb'] / best['peak_rss_mb']:.1f}x; probe log-probabilities equal: {same}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
