"""A Wenet-protocol WebSocket client: stream audio, collect the server's replies.

Used by ``scripts/client.py`` (:func:`stream_files`), ``scripts/bench_serve.py`` and the server tests.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from asr.serve.protocol import check_finite, float_to_pcm16

NOTHING_RECOGNIZED = "(nothing recognized)"  # what a final with an empty sentence prints as


@dataclass
class Reply:
    """One server reply, decoded; ``nbest`` is the parsed list for result replies, ``segment`` the
    final result's {"index", "start", "end"} (ms) when the start signal asked for segment times."""

    status: str
    type: str | None
    nbest: list[dict] | None
    message: str | None
    received_at: float  # time.perf_counter() on arrival
    segment: dict | None = None

    @classmethod
    def parse(cls, text: str) -> Reply:
        obj = json.loads(text)
        nbest = json.loads(obj["nbest"]) if "nbest" in obj else None
        return cls(obj.get("status"), obj.get("type"), nbest, obj.get("message"), time.perf_counter(),
                   obj.get("segment"))


@dataclass
class Session:
    """Everything one client run saw."""

    replies: list[Reply] = field(default_factory=list)
    sent_at: list[tuple[float, float]] = field(default_factory=list)  # (audio seconds sent so far, perf time)
    close_code: int | None = None

    @property
    def finals(self) -> list[Reply]:
        return [r for r in self.replies if r.type == "final_result"]

    @property
    def text(self) -> str:
        """The best sentence of every final result, joined (continuous decoding gives several)."""
        return " ".join(r.nbest[0]["sentence"] for r in self.finals if r.nbest and r.nbest[0]["sentence"])

    @property
    def error(self) -> str | None:
        """Why the server did not recognize the audio to its end: its ``failed`` reply, or a connection that
        closed before ``speech_end``; None when it did."""
        refusal = next((r for r in self.replies if r.status != "ok"), None)
        if refusal is not None:
            return f"server error: {refusal.message}"
        if not any(r.type == "speech_end" for r in self.replies):
            return f"the connection closed before the end of recognition (code {self.close_code})"
        return None


async def stream_audio(
    uri: str,
    samples: np.ndarray,
    sample_rate: int,
    piece_s: float = 0.1,
    realtime: bool = True,
    nbest: int = 1,
    continuous_decoding: bool = False,
    on_reply=None,
    speed: float = 1.0,
    hotwords: list | None = None,
    segment_times: bool = False,
) -> Session:
    """Send start, the samples (float (n,) in [-1, 1]) in ``piece_s`` pieces, end; read until the server closes.

    ``realtime`` paces the pieces at ``speed`` times the audio's own speed (1: as a microphone
    would; below 1: a client slower than real time).
    ``on_reply(reply)`` is called for every reply as it arrives. ``hotwords``: this connection's list
    (strings, ``"phrase:score"`` or {"phrase", "score"} objects) in the start message.
    ``segment_times``: ask for each final's stream span (``Reply.segment``).
    """
    if speed <= 0:
        raise ValueError(f"speed ({speed}) must be > 0.")
    check_finite(samples)  # before connecting: no PCM value stands for NaN or inf
    session = Session()
    piece = max(1, int(piece_s * sample_rate))
    async with connect(uri, max_size=None) as ws:

        async def receive() -> None:
            try:
                async for text in ws:
                    reply = Reply.parse(text)
                    session.replies.append(reply)
                    if on_reply is not None:
                        on_reply(reply)
            except ConnectionClosed:
                pass

        reader = asyncio.create_task(receive())
        try:
            start_signal = {"signal": "start", "nbest": nbest, "continuous_decoding": continuous_decoding}
            if hotwords:
                start_signal["hotwords"] = hotwords
            if segment_times:
                start_signal["segment_times"] = True
            await ws.send(json.dumps(start_signal))
            start = time.perf_counter()
            for offset in range(0, len(samples), piece):
                chunk = samples[offset : offset + piece]
                sent_s = (offset + len(chunk)) / sample_rate
                if realtime:
                    await asyncio.sleep(max(0.0, start + sent_s / speed - time.perf_counter()))
                await ws.send(float_to_pcm16(chunk))
                session.sent_at.append((sent_s, time.perf_counter()))
            await ws.send(json.dumps({"signal": "end"}))
        except ConnectionClosed:
            pass  # the server ended recognition early (endpoint without continuous decoding) or refused us
        await reader
        session.close_code = ws.close_code
    return session


def print_reply(reply: Reply) -> None:
    """One line per reply as ``scripts/client.py`` shows it (a final's words on a second line)."""
    if reply.status != "ok":
        print(f"  server error: {reply.message}", flush=True)
    elif reply.type == "partial_result":
        print(f"  partial: {reply.nbest[0]['sentence']}", flush=True)
    elif reply.type == "final_result":
        for rank, path in enumerate(reply.nbest, 1):
            if not path["sentence"]:
                print(f"  final {rank}: {NOTHING_RECOGNIZED}", flush=True)
                continue
            words = " ".join(f"{w['word']}[{w['start'] / 1000:.2f}-{w['end'] / 1000:.2f}]" for w in path["word_pieces"])
            print(f"  final {rank}: {path['sentence']}\n    words: {words}", flush=True)


def stream_files(paths: list[str], uri: str, piece_s: float = 0.1, realtime: bool = True, nbest: int = 1,
                 continuous_decoding: bool = False) -> int:
    """Stream each file to the server at ``uri`` and print what it says; returns how many files failed.

    A file fails with a one-line error on stderr when it cannot be read, holds samples that are not
    finite (NaN or inf: never sent), the server cannot be reached, or the server refuses or drops it.
    """
    from asr.data.audio import AudioError, load_audio
    from asr.data.features import SAMPLE_RATE

    failed = 0

    def fail(path: str | None, message: str) -> None:
        nonlocal failed
        print(f"error: {message}" if path is None else f"error: {path}: {message}", file=sys.stderr, flush=True)
        failed += 1

    for path in paths:
        try:
            wave = load_audio(path, target_sr=SAMPLE_RATE).numpy()
        except AudioError as err:  # its message names the file
            fail(None, f"{err}; nothing sent" if err.reason == "audio_nonfinite" else str(err))
            continue
        seconds = len(wave) / SAMPLE_RATE
        print(f"== {Path(path).name} ({seconds:.2f} s)", flush=True)
        try:
            session = asyncio.run(stream_audio(uri, wave, SAMPLE_RATE, piece_s=piece_s, realtime=realtime,
                                               nbest=nbest, continuous_decoding=continuous_decoding,
                                               on_reply=print_reply))
        except OSError as err:
            fail(path, f"cannot reach {uri}: {err}")
            continue
        if session.error is not None:
            fail(path, session.error)
            continue
        sent = session.sent_at[-1][0] if session.sent_at else 0.0
        if sent < seconds:  # Wenet servers stop at the first endpoint unless asked for continuous decoding
            print(f"  recognition ended at an endpoint after {sent:.2f} s of {seconds:.2f} s "
                  f"(--continuous decodes the rest)", flush=True)
    return failed
