"""The live benchmark: sessions as a microphone sends them, through the server's continuous decoding.

Sessions (:mod:`asr.bench.live_sessions`) are built from any split: a lead-in, several
sentences with pauses, a tail, over a background that runs under all of it; the same
layouts over every background. The server (``python -m asr.cli.serve``, what ``scripts/serve.py``
runs) is a child process on 127.0.0.1 (a free port; ``server_args`` pass any of its options through, so runtime
options can be compared) and every session is streamed to it with continuous decoding,
paced at ``speed`` times real time (0: as fast as the server takes it), at most
``concurrency`` connections at once, the whole run within ``max_seconds``. Every
sentence is also sent alone on its own connection, with the background that lies under
it in the session and a short pad (``live_sessions.alone``); the two are compared
sentence for sentence. Word-to-sentence attribution and endpoint outcomes are
:mod:`asr.bench.live_score`'s.

Figures, per background:

* session WER: the session's final texts concatenated against its references
  concatenated (word errors over reference words, summed over sessions);
* alone WER: the same sentences, each alone (the finals of its connection joined: it decodes
  with continuous decoding too, so an endpoint inside a sentence costs it nothing);
  ``difference`` is session minus alone: what talking in a session costs;
* endpoints per session, against the sentences per session: with one sentence per
  utterance a session has ``sentences - 1`` endpoints (plus any in the tail);
* late: gaps where the next utterance started after the next sentence's speech had begun
  (the speech before it went to the previous final); fused: gaps with no endpoint at all,
  two sentences in one final; splits: utterance starts inside a sentence that are not its
  late start;
* first word after an endpoint: of the sentences that follow an endpoint (clean or late
  gaps), how many have their first word recognized (aligned as a match) in the session,
  and how many of the same sentences alone;
* first-word latency: for sentences whose utterance starts cleanly (the first one, and
  those after a clean gap), the audio the client had sent when the utterance's first
  result with a word arrived, minus the speech onset (median, seconds of audio). At
  ``speed`` 1 that is the wait a user sees (the chunk the word completes, plus decoding);
  faster pacing counts the server's compute ``speed`` times over; unpaced, none. Early:
  words arrived before the speech (from the background);
* WER by sentence position in the session (JSON ``by_position``), session and alone.
"""

from __future__ import annotations

import asyncio
import bisect
import select
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

import numpy as np

from asr.bench.live_sessions import (BACKGROUNDS, Timing, alone, check_backgrounds, load_sentences, plan_sessions,
                                     render, session_background)
from asr.bench.live_score import Final, Heard, Word, score_alone, score_session, summarize
from asr.cli import child_env
from asr.data.features import SAMPLE_RATE

# Seconds a server child may take to say where it serves: importing torch and loading a model and the VAD
# take seconds on an idle machine, minutes at low priority beside a training run.
SERVER_START_S = 120.0


@dataclass(frozen=True)
class LiveConfig:
    """What to run; see the module docstring. ``server_args``: extra ``scripts/serve.py`` arguments."""

    checkpoint: str
    cuts: str
    data_dir: str | None = None
    sessions: int = 12
    sentences: int = 5
    backgrounds: tuple[str, ...] = BACKGROUNDS
    seed: int = 0
    timing: Timing = field(default_factory=Timing)
    speed: float = 1.0
    concurrency: int = 8
    piece_s: float = 0.1
    max_seconds: float = 1800.0
    server_args: tuple[str, ...] = ()
    server_start_s: float = SERVER_START_S

    def __post_init__(self) -> None:
        check_backgrounds(self.backgrounds)
        if (self.speed < 0 or self.concurrency < 1 or self.piece_s <= 0 or self.max_seconds <= 0
                or self.server_start_s <= 0):
            raise ValueError(f"speed ({self.speed}) must be >= 0, concurrency ({self.concurrency}) >= 1, "
                             f"piece_s ({self.piece_s}), max_seconds ({self.max_seconds}) and server_start_s "
                             f"({self.server_start_s}) > 0")


class ServerStartError(RuntimeError):
    """The server child did not say where it serves within its start time (it failed, or the machine is slow)."""


@contextmanager
def serve_process(checkpoint: str, server_args: tuple[str, ...], max_connections: int, max_backlog_s: float,
                  start_timeout_s: float = SERVER_START_S):
    """The server (``asr.cli.serve``) as a child process on 127.0.0.1 and a free port; yields its ws:// URI.
    ``server_args`` come last, so they override the bench's own limits."""
    cmd = [sys.executable, "-m", "asr.cli.serve", "--checkpoint", checkpoint, "--host", "127.0.0.1", "--port", "0",
           "--max-connections", str(max_connections), "--max-backlog-s", f"{max_backlog_s:g}", *server_args]
    env = child_env()
    with tempfile.TemporaryFile("w+") as log:  # its log goes to a file: an unread pipe would stall it
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
        try:
            ready, _, _ = select.select([proc.stdout], [], [], start_timeout_s)
            line = proc.stdout.readline() if ready else ""
            if not line.startswith("serving on "):
                proc.kill()
                proc.wait()
                log.seek(0)
                tail = " | ".join(log.read().strip().splitlines()[-2:])
                raise ServerStartError(f"the server (asr.cli.serve) did not start within {start_timeout_s:g} s "
                                       f"({line.strip() or 'no output'}): {tail or 'nothing on stderr'}; a loaded "
                                       "machine may need a longer --server-start-s")
            yield line.split()[2]
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def _audio_sent(sent_at: list[tuple[float, float]], when: float) -> float:
    """Audio seconds the client had sent by perf time ``when``."""
    k = bisect.bisect_right([t for _, t in sent_at], when)
    return sent_at[k - 1][0] if k else 0.0


def heard(session, paced: bool) -> Heard:
    """A client ``Session`` (asr.serve.client) as :class:`Heard`; ValueError when it did not end normally."""
    bad = [r.message for r in session.replies if r.status != "ok"]
    if bad or not session.replies or session.replies[-1].type != "speech_end":
        raise ValueError(bad[0] if bad else
                         f"the connection ended without speech_end (close code {session.close_code})")
    finals, first = [], [None]
    for reply in session.replies:
        if reply.type not in ("partial_result", "final_result"):
            continue
        best = reply.nbest[0] if reply.nbest else {}
        text = best.get("sentence", "")
        if text.strip() and first[-1] is None and paced:
            first[-1] = _audio_sent(session.sent_at, reply.received_at)
        if reply.type == "final_result":
            pieces = best.get("word_pieces", [])
            if [p["word"] for p in pieces] == text.split():
                words = tuple(Word(p["word"], p["start"] / 1000, p["end"] / 1000) for p in pieces)
            else:  # grouping differs from the text's words: keep the words, without times
                words = tuple(Word(w) for w in text.split())
            if reply.segment is None:
                raise ValueError("a final result without its segment: the server ignored segment_times")
            finals.append(Final(words, reply.segment["start"] / 1000, reply.segment["end"] / 1000))
            first.append(None)
    return Heard(tuple(finals), tuple(first[:-1]))


async def _stream_all(uri: str, clips: list[np.ndarray], config: LiveConfig, deadline: float) -> list:
    """Stream every clip (longest first, ``concurrency`` at once); a client Session, or the error, per clip."""
    from asr.serve.client import stream_audio

    gate = asyncio.Semaphore(config.concurrency)

    async def one(clip: np.ndarray):
        async with gate:
            return await stream_audio(uri, clip.astype(np.float32), SAMPLE_RATE, piece_s=config.piece_s,
                                      realtime=config.speed > 0, speed=config.speed or 1.0,
                                      continuous_decoding=True, segment_times=True)

    order = sorted(range(len(clips)), key=lambda i: -len(clips[i]))
    tasks = {i: asyncio.create_task(one(clips[i])) for i in order}
    done, pending = await asyncio.wait(tasks.values(), timeout=max(0.0, deadline - time.monotonic()))
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    out = []
    for i in range(len(clips)):
        task = tasks[i]
        if task in pending:
            out.append(TimeoutError(f"not finished within max_seconds ({config.max_seconds:g} s)"))
        else:
            out.append(task.exception() or task.result())
    return out


def _spans_s(spans) -> list[tuple[float, float]]:
    return [(a / SAMPLE_RATE, b / SAMPLE_RATE) for a, b in spans]


def run_sessions(uri: str, name: str, plans, config: LiveConfig, deadline: float,
                 background_of=None) -> tuple[dict, list[dict]]:
    """Stream one background's sessions and alone sentences; (summary, per-session details).
    ``background_of(plan)``: the session's background with its pads (default: ``session_background``
    of ``name``), for benchmarks with backgrounds of their own."""
    clips, jobs = [], []  # jobs: per session, (its clip's index, [(alone clip index, speech span)])
    for plan in plans:
        bg = session_background(plan, name, config.seed) if background_of is None else background_of(plan)
        clips.append(render(plan, bg))
        own = len(clips) - 1
        alone_jobs = []
        for placed in plan.placed:
            clip, span = alone(placed, bg)
            clips.append(clip)
            alone_jobs.append((len(clips) - 1, span))
        jobs.append((own, alone_jobs))
    results = asyncio.run(_stream_all(uri, clips, config, deadline))
    paced = config.speed > 0
    scores, alone_scores, details, failures = [], [], [], Counter()
    for plan, (own, alone_jobs) in zip(plans, jobs):
        try:
            got = [results[own], *(results[i] for i, _ in alone_jobs)]
            failed = next((r for r in got if isinstance(r, BaseException)), None)
            if failed is not None:
                raise failed
            session_heard = heard(got[0], paced)
            alone_heard = [heard(r, paced) for r in got[1:]]
        except Exception as err:  # noqa: BLE001 - a connection's failure is counted, the other sessions go on
            failures[f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:120]}"] += 1
            continue
        refs = [p.sentence.text for p in plan.placed]
        spans = _spans_s(p.speech for p in plan.placed)
        scores.append(score_session(refs, spans, session_heard))
        alone_scores.append([score_alone(ref, span, h) for ref, span, h in
                             zip(refs, _spans_s(span for _, span in alone_jobs), alone_heard)])
        details.append({
            "session": plan.index, "background": name, "cuts": [p.sentence.cut_id for p in plan.placed],
            "seconds": plan.samples / SAMPLE_RATE, "speech_s": spans, "refs": refs,
            "finals": [{"text": " ".join(w.text for w in f.words), "start_s": f.start_s, "end_s": f.end_s}
                       for f in session_heard.finals],
            "gaps": list(scores[-1].gaps),
            "alone": [" ".join(w.text for w in h.words) for h in alone_heard],
        })
    summary = summarize(scores, alone_scores)
    summary["failed_sessions"] = dict(failures)
    return summary, details


def run_live(config: LiveConfig, log=print) -> dict:
    """Run the benchmark; returns the report (``format_table`` prints it)."""
    start = time.monotonic()
    deadline = start + config.max_seconds
    need = config.sessions * config.sentences
    sentences, skipped = load_sentences(config.cuts, need, config.data_dir)
    if len(sentences) < need:
        raise ValueError(f"{config.cuts} holds {len(sentences)} usable sentences; {config.sessions} sessions of "
                         f"{config.sentences} need {need} (skipped: {dict(skipped) or 'none'})")
    plans = plan_sessions(sentences, config.sessions, config.sentences, config.seed, config.timing)
    longest = max(plan.samples for plan in plans) / SAMPLE_RATE
    report = {"config": {**asdict(config), "timing": asdict(config.timing)}, "skipped_cuts": dict(skipped),
              "session_seconds": sum(p.samples for p in plans) / SAMPLE_RATE, "backgrounds": {}, "sessions": []}
    with serve_process(config.checkpoint, config.server_args, config.concurrency + 1, longest + 10.0,
                       config.server_start_s) as uri:
        for name in config.backgrounds:
            if time.monotonic() >= deadline:
                report["backgrounds"][name] = {"not_run": f"max_seconds ({config.max_seconds:g}) spent"}
                continue
            began = time.monotonic()
            summary, details = run_sessions(uri, name, plans, config, deadline)
            summary["wall_s"] = time.monotonic() - began
            report["backgrounds"][name] = summary
            report["sessions"] += details
            log(f"{name}: {summary['sessions']} sessions in {summary['wall_s']:.0f} s"
                + (f"; failed: {summary['failed_sessions']}" if summary["failed_sessions"] else ""))
    report["wall_s"] = time.monotonic() - start
    return report


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}"


def _sec(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def format_table(report: dict) -> str:
    """The report as Markdown: one row per background, then WER by sentence position."""
    per = report["config"]["sentences"]
    lines = ["| background | sessions | session WER % | alone WER % | difference | endpoints / session "
             f"({per} sentences) | late | fused | splits | first word after endpoint: session / alone "
             "| first-word latency s: session / alone (early) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, b in report["backgrounds"].items():
        if "not_run" in b:
            lines.append(f"| {name} | not run: {b['not_run']} |" + " |" * 9)
            continue
        fw, lat = b["first_word_after_endpoint"], b["first_word_latency_s"]
        diff = "n/a" if b["wer_difference"] is None else f"{100 * b['wer_difference']:+.1f}"
        per_session = b["endpoints"] / b["sessions"] if b["sessions"] else float("nan")
        lines.append(
            f"| {name} | {b['sessions']} | {_pct(b['session_wer'])} | {_pct(b['alone_wer'])} | {diff} | "
            f"{per_session:.1f} | {b['gaps_late']}/{b['gaps']} | {b['gaps_fused']}/{b['gaps']} | {b['splits']} | "
            f"{fw['session_right']} / {fw['alone_right']} of {fw['sentences']} | "
            f"{_sec(lat['session_median'])} / {_sec(lat['alone_median'])} "
            f"({lat['session_early']} / {lat['alone_early']}) |")
    ran = {n: b for n, b in report["backgrounds"].items() if "not_run" not in b}
    if ran:
        positions = max(len(b["by_position"]) for b in ran.values())
        lines += ["", "WER % by sentence position, session / alone:", "",
                  "| background | " + " | ".join(str(k + 1) for k in range(positions)) + " |",
                  "|---|" + "---|" * positions]
        for name, b in ran.items():
            cells = [f"{_pct(p['session_wer'])} / {_pct(p['alone_wer'])}" for p in b["by_position"]]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
