"""A soak run of the WebSocket server: many real-time streams for minutes, each connection with its own
hotword list, memory sampled, every final compared with offline decoding, the server's counters read.

``streams`` clients run at once; each streams one utterance in real time, reads its final, closes and
connects again with the next (utterance, hotword list) pair, until ``seconds`` have passed. The pairs
cycle through ``pairs`` distinct lists, so the server compiles lists all along (and its cache evicts).
The server runs in this process (its decoding thread as in ``scripts/serve.py``): the resident memory
sampled is the server's plus the clients', and the counters are read from the objects themselves.
Endpointing and the VAD are off in the recognizer given, so each connection has one final, which must
equal the offline streaming recognizer's (``asr.streaming.recognizer.StreamingRecognizer``, what
``scripts/stream.py`` runs) with the same list.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from asr.data.features import SAMPLE_RATE
from asr.serve.client import stream_audio
from asr.serve.multi_stream import MultiStreamRecognizer
from asr.serve.server import AsrServer, ServerConfig


@dataclass(frozen=True)
class SoakConfig:
    """streams: clients at once; seconds: how long new connections start (the run ends with the last one);
    warmup_s: memory before this is not judged; sample_every_s: memory sampling period; piece_s: audio per
    message (real time); seed: the clients' start offsets."""

    streams: int = 32
    seconds: float = 180.0
    warmup_s: float = 60.0
    sample_every_s: float = 2.0
    piece_s: float = 0.1
    seed: int = 0

    def __post_init__(self) -> None:
        if self.streams < 1 or not 0 < self.warmup_s < self.seconds or self.sample_every_s <= 0 or self.piece_s <= 0:
            raise ValueError(f"soak settings out of range: {self} (streams >= 1, 0 < warmup_s < seconds, "
                             "sample_every_s > 0, piece_s > 0).")


@dataclass(frozen=True)
class Pair:
    """One connection's audio (n,) at SAMPLE_RATE, its hotword list and the offline final it must equal."""

    wave: torch.Tensor
    hotwords: tuple[str, ...]
    reference: str


@dataclass
class SoakReport:
    connections: int = 0
    finals_equal: int = 0
    failed: list[str] = field(default_factory=list)  # a few of the connections that got no final (why)
    differing: list[str] = field(default_factory=list)  # a few finals that differ from offline decoding
    audio_s: float = 0.0
    wall_s: float = 0.0
    rss_mib: list[tuple[float, float]] = field(default_factory=list)  # (seconds into the run, MiB)
    counters: dict[str, int] = field(default_factory=dict)  # the server's, after the last connection closed
    warmup_s: float = 0.0
    every_pair_s: float = float("inf")  # when each pair had been served once (every list compiled and cached)

    @property
    def judged_from_s(self) -> float:
        """The warm-up's end: ``warmup_s``, or later when not every hotword list had been compiled by then."""
        return max(self.warmup_s, self.every_pair_s)

    def after_warmup(self) -> list[float]:
        return [mib for t, mib in self.rss_mib if t >= self.judged_from_s]

    def growth_mib_per_min(self) -> float:
        """Least-squares slope of the resident memory after the warm-up, MiB per minute."""
        points = [(t, mib) for t, mib in self.rss_mib if t >= self.judged_from_s]
        if len(points) < 2:
            return float("nan")
        mean_t = sum(t for t, _ in points) / len(points)
        mean_m = sum(m for _, m in points) / len(points)
        var = sum((t - mean_t) ** 2 for t, _ in points)
        return 60.0 * sum((t - mean_t) * (m - mean_m) for t, m in points) / var if var else 0.0

    def lines(self) -> list[str]:
        kept = self.after_warmup()
        spread = f"{min(kept):.0f}-{max(kept):.0f} MiB" if kept else "no samples"
        quarters = " / ".join(f"{kept[min(len(kept) - 1, q * len(kept) // 4)]:.0f}" for q in range(1, 5)) if kept else ""
        return [
            f"connections     : {self.connections} in {self.wall_s:.0f} s ({self.audio_s:.0f} s of audio, "
            f"{self.audio_s / max(self.wall_s, 1e-9):.1f} streams in real time on average)",
            f"finals == offline: {self.finals_equal}/{self.connections}"
            + (f" (differing: {'; '.join(self.differing)})" if self.differing else ""),
            f"failed          : {len(self.failed)}" + (f" ({'; '.join(self.failed)})" if self.failed else ""),
            f"resident memory : {self.rss_mib[0][1]:.0f} MiB at the start, {spread} after the warm-up "
            f"(from {self.judged_from_s:.0f} s: {self.warmup_s:g} s and every list served once; {len(kept)} samples; "
            f"at its quarters {quarters} MiB), slope {self.growth_mib_per_min():+.2f} MiB/min"
            if self.rss_mib else "resident memory : not sampled",
            "counters at end : " + ", ".join(f"{k} {v}" for k, v in self.counters.items()),
        ]


def make_pairs(model, tokenizer, options, waves: list[torch.Tensor], lists: list[list[str]], features=None,
               fusion=None) -> list[Pair]:
    """Pair i: ``waves[i % len(waves)]`` with ``lists[i]``, and its offline final with that list."""
    from asr.streaming.recognizer import StreamingRecognizer

    pairs = []
    for i, hotwords in enumerate(lists):
        wave = waves[i % len(waves)]
        offline = StreamingRecognizer(model.eval(), tokenizer, options, fusion=fusion, features=features,
                                      hotwords=hotwords or None)
        offline.accept_waveform(wave)
        pairs.append(Pair(wave, tuple(hotwords), offline.finalize()))
    return pairs


def draw_lists(pool: list[str], count: int, size: int, seed: int = 0) -> list[list[str]]:
    """``count`` lists of ``size`` phrases of ``pool`` (list i drawn with seed ``seed + i``)."""
    if size > len(pool):
        raise ValueError(f"the hotword pool holds {len(pool)} phrases, {size} per list asked.")
    return [random.Random(seed + i).sample(pool, size) for i in range(count)]


def rss_mib() -> float:
    """This process's resident memory in MiB (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def server_counters(server: AsrServer, recognizer: MultiStreamRecognizer) -> dict[str, int]:
    """Everything that could grow with the number of connections or steps, as counts."""
    lists, _ = recognizer.cached_hotword_lists()
    return {**server.open_counts(), "recognizer streams": len(recognizer.streams),
            "batch sizes kept": len(recognizer.batch_sizes), "batched steps": recognizer.batch_sizes.steps,
            "hotword lists cached": lists}


async def soak(recognizer: MultiStreamRecognizer, pairs: list[Pair], config: SoakConfig) -> SoakReport:
    """Run the soak (see the module docstring) and report it."""
    if not pairs:
        raise ValueError("the soak needs at least one (utterance, hotword list) pair.")
    report = SoakReport(warmup_s=config.warmup_s)
    server_config = ServerConfig(port=0, max_connections=config.streams, max_connections_per_client=config.streams)
    next_pair = iter(range(1 << 62))
    rng = random.Random(config.seed)
    offsets = [rng.uniform(0.0, float(pairs[0].wave.numel()) / SAMPLE_RATE) for _ in range(config.streams)]
    async with AsrServer(recognizer, server_config) as server:
        uri = f"ws://127.0.0.1:{server.port}"
        start = time.monotonic()

        async def client(offset: float) -> None:
            await asyncio.sleep(offset)
            while time.monotonic() - start < config.seconds:
                pair = pairs[next(next_pair) % len(pairs)]
                session = await stream_audio(uri, pair.wave.numpy(), SAMPLE_RATE, piece_s=config.piece_s,
                                             realtime=True, hotwords=list(pair.hotwords) or None)
                report.connections += 1
                if report.connections == len(pairs):
                    report.every_pair_s = time.monotonic() - start
                report.audio_s += pair.wave.numel() / SAMPLE_RATE
                if session.error is not None:
                    if len(report.failed) < 3:
                        report.failed.append(session.error)
                elif session.text == pair.reference:
                    report.finals_equal += 1
                elif len(report.differing) < 3:
                    report.differing.append(f"{session.text!r} != {pair.reference!r}")

        async def sample_memory(done: asyncio.Event) -> None:
            while not done.is_set():
                report.rss_mib.append((time.monotonic() - start, rss_mib()))
                try:
                    await asyncio.wait_for(done.wait(), config.sample_every_s)
                except TimeoutError:
                    pass

        done = asyncio.Event()
        sampler = asyncio.create_task(sample_memory(done))
        try:
            await asyncio.gather(*(client(o) for o in offsets))
        finally:
            done.set()
            await sampler
        report.wall_s = time.monotonic() - start
        for _ in range(50):  # the last connections' handlers finish closing
            if not server.open_counts()["open connections"]:
                break
            await asyncio.sleep(0.1)
        report.counters = server_counters(server, recognizer)
    return report
