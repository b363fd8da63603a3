"""sherpa-onnx's online WebSocket server (``sherpa-onnx-bin``) serving our export, and a client for it.

Its protocol differs from Wenet's (ours): the client sends raw float32 samples as binary
messages and the text ``Done`` at the end; the server answers every decoded chunk with a JSON
result (``text``, ``tokens``, ``is_final``, ...) and ``Done!`` when it has decoded everything. The client
below records what it sent and received in a :class:`asr.serve.client.Session`, so the load
test measures both servers with the same code.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from asr.serve.client import Reply, Session

SERVER_BINARY = "sherpa-onnx-online-websocket-server"
DONE = "Done!"


def server_binary() -> str | None:
    """Path of sherpa-onnx's online WebSocket server (pip install sherpa-onnx-bin), or None."""
    return shutil.which(SERVER_BINARY)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_command(export_dir: str | Path, port: int, tail_s: float, feat_dim: int, threads: int = 1,
                   max_batch: int = 32) -> list[str]:
    """The command serving ``export_dir`` on ``port``: endpointing off (finals comparable with offline
    decoding), ``tail_s`` of zeros after each stream so its last frames are decoded."""
    folder = Path(export_dir).resolve()  # the server runs in a temporary folder
    binary = server_binary()
    if binary is None:
        raise FileNotFoundError(f"{SERVER_BINARY} is not installed (pip install sherpa-onnx-bin==2.0.1).")
    return [binary, f"--port={port}", f"--nemo-ctc-model={folder / 'model.onnx'}", f"--tokens={folder / 'tokens.txt'}",
            f"--feat-dim={feat_dim}", "--model-type=nemo_ctc", f"--num-threads={threads}", "--num-work-threads=1",
            "--num-io-threads=1", f"--max-batch-size={max_batch}", "--enable-endpoint=false",
            f"--end-tail-padding={tail_s:.3f}", "--decoding-method=greedy_search"]


def start_server(command: list[str], port: int, timeout_s: float = 60.0) -> subprocess.Popen:
    """Start the server and wait until it accepts connections on 127.0.0.1:``port``.

    It runs in a temporary folder: it writes a log.txt into its working directory."""
    workdir = tempfile.mkdtemp(prefix="sherpa_server_")
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=workdir)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = " | ".join(proc.stderr.read().strip().splitlines()[-3:])
            raise RuntimeError(f"{SERVER_BINARY} exited with {proc.returncode}: {tail}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc
        except OSError:
            time.sleep(0.2)
    proc.terminate()
    raise RuntimeError(f"{SERVER_BINARY} did not listen on port {port} within {timeout_s} s.")


def _reply(text: str) -> Reply | None:
    """A sherpa-onnx result as a Wenet-style reply (None for the closing ``Done!``)."""
    if text == DONE:
        return None
    obj = json.loads(text)
    kind = "final_result" if obj.get("is_final") else "partial_result"
    best = {"sentence": obj.get("text", ""), "tokens": obj.get("tokens", [])}
    return Reply("ok", kind, [best], None, time.perf_counter())


async def stream_to_sherpa(uri: str, samples: np.ndarray, sample_rate: int, piece_s: float = 0.1,
                           realtime: bool = True, timeout_s: float = 300.0) -> Session:
    """Send the samples (float (n,) in [-1, 1]) in ``piece_s`` pieces, paced in real time, then ``Done``;
    read the results until ``Done!``. The last result is the final one (``is_final`` at the end of input)."""
    from websockets.asyncio.client import connect

    session = Session()
    piece = max(1, int(piece_s * sample_rate))
    async with connect(uri, max_size=None) as ws:

        async def receive() -> None:
            async for message in ws:
                reply = _reply(message)
                if reply is None:
                    return
                session.replies.append(reply)

        reader = asyncio.create_task(receive())
        start = time.perf_counter()
        for offset in range(0, len(samples), piece):
            chunk = np.asarray(samples[offset: offset + piece], dtype="<f4")
            sent_s = (offset + len(chunk)) / sample_rate
            if realtime:
                await asyncio.sleep(max(0.0, start + sent_s - time.perf_counter()))
            await ws.send(chunk.tobytes())
            session.sent_at.append((sent_s, time.perf_counter()))
        await ws.send("Done")
        await asyncio.wait_for(reader, timeout_s)
    if session.replies:  # the result after the last chunk is this stream's final text
        last = session.replies[-1]
        session.replies[-1] = Reply(last.status, "final_result", last.nbest, None, last.received_at)
    return session
