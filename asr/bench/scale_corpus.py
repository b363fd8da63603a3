"""Loader memory and start-up at corpus scale: eager vs lazy manifests vs Shar shards.

`build_scale_corpus` writes manifests of N cuts (10k ... 1M) that all point at a
handful of real audio files (short windows of the first cuts of a source manifest),
so nothing large lands on disk except the Shar shards, which hold each cut's audio
(about 19 KB a cut) and are built up to ``shar_max_cuts``. Every scale cut's audio
is one of the few template windows, so `write_scale_shar` encodes each template
once with lhotse's own Shar writer and copies its bytes under every cut id: the same
shards `write_shar` would give, at disk speed (1M cuts: minutes, not an hour of flac
encoding). `measure` runs in a fresh
process per (size, mode) so peak RSS belongs to that reader alone: it builds the
training loader, times the first batch, draws a few more, shuts the workers down and
reads the main process's and the workers' peak RSS (``ru_maxrss``).
"""

from __future__ import annotations

import argparse
import gc
import gzip
import io
import json
import resource
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from itertools import islice
from pathlib import Path

from lhotse.cut import Cut
from lhotse.utils import fastcopy

from asr.data.manifest import CorpusStats, read_cuts, write_cuts, write_stats
from asr.data.shar import AUDIO_FIELD, CUTS_FIELD, write_shar

MODES = ("eager", "lazy", "shar")


def _templates(source: Path, count: int) -> list[Cut]:
    """Windows of 0.6-1.2 s at the start of the first ``count`` cuts of ``source`` (real audio)."""
    cuts = list(islice(read_cuts(source.resolve(), lazy=True), count))  # absolute audio paths
    if len(cuts) < count:
        raise ValueError(f"{source} has {len(cuts)} cuts, need {count} audio templates")
    windows = []
    for i, cut in enumerate(cuts):
        duration = min(cut.duration, 0.6 + 0.6 * i / max(1, count - 1))
        sup = fastcopy(cut.supervisions[0], duration=duration)
        windows.append(fastcopy(cut, duration=duration, supervisions=[sup]))
    return windows


def _scale_cut_id(n: int, i: int) -> str:
    return f"scale{n}-{i:07d}"


def _scaled(templates: list[Cut], n: int) -> Iterator[Cut]:
    for i in range(n):
        cut = templates[i % len(templates)]
        cut_id = _scale_cut_id(n, i)
        yield fastcopy(cut, id=cut_id, supervisions=[fastcopy(cut.supervisions[0], id=cut_id)])


def write_scale_shar(templates: list[Cut], n: int, out_dir: Path, shard_size: int = 1000) -> CorpusStats:
    """Shar shards of ``_scaled(templates, n)``, each template's audio encoded once.

    The first ``len(templates)`` cuts go through ``write_shar`` (lhotse's writer); every
    later cut is cut ``i % len(templates)``'s cut record, audio and recording members,
    renamed to its own id. Shard layout and names are those of
    ``write_shar(..., shard_size=shard_size)``.
    """
    if out_dir.is_dir() and any(out_dir.iterdir()):
        raise FileExistsError(f"{out_dir} is not empty")
    count = min(len(templates), n)
    with tempfile.TemporaryDirectory(dir=out_dir.parent) as scratch:
        write_shar(islice(_scaled(templates, n), count), Path(scratch) / "templates", shard_size=count)
        with gzip.open(Path(scratch) / "templates" / f"{CUTS_FIELD}.000000.jsonl.gz", "rt") as f:
            records = [json.loads(line) for line in f]
        with tarfile.open(Path(scratch) / "templates" / f"{AUDIO_FIELD}.000000.tar") as tar:
            members = [(m.name, tar.extractfile(m).read()) for m in tar.getmembers()]
    # per template: [(suffix, bytes)] in the writer's member order (audio, then its recording json)
    template_of = {record["id"]: t for t, record in enumerate(records)}
    payloads = [[] for _ in range(count)]
    for name, data in members:
        cut_id, suffix = name.split(".", 1)
        payloads[template_of[cut_id]].append((suffix, data))
    out_dir.mkdir(parents=True, exist_ok=True)
    seconds = 0.0
    for shard, start in enumerate(range(0, n, shard_size)):
        with gzip.open(out_dir / f"{CUTS_FIELD}.{shard:06d}.jsonl.gz", "wt") as cuts_file, \
                tarfile.open(out_dir / f"{AUDIO_FIELD}.{shard:06d}.tar", "w") as tar:
            for i in range(start, min(n, start + shard_size)):
                cut_id = _scale_cut_id(n, i)
                record = dict(records[i % count], id=cut_id)
                record["supervisions"] = [dict(record["supervisions"][0], id=cut_id)]
                cuts_file.write(json.dumps(record) + "\n")
                seconds += record["duration"]
                for suffix, data in payloads[i % count]:
                    info = tarfile.TarInfo(f"{cut_id}.{suffix}")
                    info.size, info.mode = len(data), 0o644
                    tar.addfile(info, io.BytesIO(data))
    stats = CorpusStats(n, seconds)
    write_stats(stats, out_dir)
    return stats


def build_scale_corpus(source: Path, out_dir: Path, sizes: list[int], shar_max_cuts: int,
                       audio_files: int = 8) -> dict[int, dict[str, Path]]:
    """{size: {"manifest": path, "shar": folder (sizes <= shar_max_cuts)}}; existing outputs are reused."""
    out_dir.mkdir(parents=True, exist_ok=True)
    templates = _templates(source, audio_files)
    built: dict[int, dict[str, Path]] = {}
    for n in sizes:
        manifest = out_dir / f"cuts_{n}.jsonl.gz"
        if not manifest.is_file():
            write_cuts(_scaled(templates, n), manifest)
        built[n] = {"manifest": manifest}
        if n <= shar_max_cuts:
            shar = out_dir / f"shar_{n}"
            if not shar.is_dir():
                write_scale_shar(templates, n, shar, shard_size=1000)
            built[n]["shar"] = shar
    return built


# The bucketing sampler's look-ahead, the same for every mode. Shar cuts carry their audio,
# so a buffer of N Shar cuts holds N cuts' audio: training's 20,000 (chosen for batch
# equality with the in-memory read) made the first Shar batch wait for 20,000 decoded
# files and gave no number in the first scale run.
SCALE_BUCKET_BUFFER = 2_000


def measure(mode: str, path: Path, tokenizer: str, workers: int, batches: int, max_duration: float,
            bucket_buffer: int = SCALE_BUCKET_BUFFER) -> dict:
    """Time to the first training batch and peak RSS (MB) of the main process and its workers."""
    import torch

    from asr.data.datamodule import AsrDataModule

    torch.set_num_threads(1)
    started = time.perf_counter()
    source = {"shar_dir": str(path)} if mode == "shar" else {"train_cuts": str(path), "lazy": mode == "lazy"}
    dm = AsrDataModule(str(path.parent), tokenizer, max_duration=max_duration, num_workers=workers,
                       speed_perturb=False, spec_augment=False, max_duration_per_utt=min(20.0, max_duration),
                       bucket_buffer_size=bucket_buffer, **source)
    batch_iter = iter(dm.train_dataloader())
    next(batch_iter)
    first_batch_s = time.perf_counter() - started
    for _ in range(batches - 1):
        next(batch_iter)
    batch_iter.close()
    del batch_iter
    gc.collect()  # frees the DataLoader iterator, which joins its workers: their peak RSS is in RUSAGE_CHILDREN
    return {
        "first_batch_s": first_batch_s,
        "main_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "worker_peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024 if workers else 0.0,
    }


def measure_in_fresh_process(mode: str, path: Path, tokenizer: str, workers: int, batches: int,
                             max_duration: float, bucket_buffer: int = SCALE_BUCKET_BUFFER) -> dict:
    cmd = [sys.executable, "-m", "asr.bench.scale_corpus", mode, str(path), tokenizer, str(workers), str(batches),
           str(max_duration), str(bucket_buffer)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def format_row(cuts: int, mode: str, result: dict | None) -> str:
    if result is None:
        return f"{cuts:>9,d}  {mode:<6} {'n/a (not built)':>14}"
    return (f"{cuts:>9,d}  {mode:<6} {result['first_batch_s']:>14.1f} {result['main_peak_mb']:>13.0f} "
            f"{result['worker_peak_mb']:>15.0f}")


HEADER = f"{'cuts':>9}  {'mode':<6} {'first batch s':>14} {'main peak MB':>13} {'worker peak MB':>15}"


def _main() -> None:
    p = argparse.ArgumentParser(description="one measurement (run by measure_in_fresh_process)")
    p.add_argument("mode", choices=MODES)
    p.add_argument("path", type=Path)
    p.add_argument("tokenizer")
    p.add_argument("workers", type=int)
    p.add_argument("batches", type=int)
    p.add_argument("max_duration", type=float)
    p.add_argument("bucket_buffer", type=int)
    args = p.parse_args()
    print(json.dumps(measure(args.mode, args.path, args.tokenizer, args.workers, args.batches, args.max_duration,
                             args.bucket_buffer)))


if __name__ == "__main__":
    _main()
