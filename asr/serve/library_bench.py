"""Which WebSocket server library: `websockets` alone or FastAPI on uvicorn, measured on loopback.

The serving protocol's traffic is many small binary frames in (100 ms of 16-bit PCM,
3200 bytes) and small JSON texts out. Each library serves the same handler (a reply
per frame, no decoding), in its own child process on 127.0.0.1; N clients each send M
frames and wait for each reply. The figure that matters on a 2-core machine is the
server's CPU per message (its /proc user+system time over the messages): that is CPU
the decoder does not get. FastAPI needs ``pip install fastapi uvicorn``.

    python -m asr.serve.library_bench server websockets   # child: prints its port, serves until killed
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

LIBRARIES = ("websockets", "fastapi")
FRAME_BYTES = 3200  # 100 ms of 16 kHz 16-bit mono
REPLY = json.dumps({"status": "ok", "type": "partial_result", "nbest": json.dumps([{"sentence": "a b c"}])})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_websockets(port: int) -> None:
    from websockets.asyncio.server import serve

    async def handler(ws):
        async for message in ws:
            await ws.send(REPLY)

    async def main():
        async with serve(handler, "127.0.0.1", port, max_size=2**20):
            print(port, flush=True)
            await asyncio.Future()

    asyncio.run(main())


def serve_fastapi(port: int) -> None:
    import uvicorn
    from fastapi import FastAPI, WebSocket, WebSocketDisconnect

    app = FastAPI()

    async def handler(ws):
        await ws.accept()
        try:
            while True:
                await ws.receive_bytes()
                await ws.send_text(REPLY)
        except WebSocketDisconnect:
            pass

    # Set here, not written in the signature: this module's postponed annotations would make it
    # the string "WebSocket", which FastAPI cannot resolve from a function-local import (it then
    # reads `ws` as a query parameter and refuses every connection with HTTP 403).
    handler.__annotations__["ws"] = WebSocket
    app.websocket("/")(handler)
    print(port, flush=True)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", ws_max_size=2**20)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _clients(uri: str, clients: int, frames: int) -> None:
    from websockets.asyncio.client import connect

    payload = bytes(FRAME_BYTES)

    async def one():
        async with connect(uri, max_size=2**20) as ws:
            for _ in range(frames):
                await ws.send(payload)
                await ws.recv()

    await asyncio.gather(*(one() for _ in range(clients)))


def measure(library: str, clients: int, frames: int, timeout_s: float = 120.0) -> dict:
    """One library: a child server, ``clients`` x ``frames`` ping-pongs; wall time and server CPU per message."""
    if library not in LIBRARIES:
        raise ValueError(f"library must be one of {LIBRARIES}, got {library!r}")
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "asr.serve.library_bench", "server", library, str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline().strip()
        if line != str(port):
            raise RuntimeError(f"{library} server did not start: {line!r} {server.stderr.read()[-500:]}")
        uri = f"ws://127.0.0.1:{port}/"
        for _ in range(50):  # uvicorn prints before it listens
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        asyncio.run(asyncio.wait_for(_clients(uri, 1, 5), timeout_s))  # warm up
        cpu0, wall0 = _cpu_seconds(server.pid), time.perf_counter()
        asyncio.run(asyncio.wait_for(_clients(uri, clients, frames), timeout_s))
        wall, cpu = time.perf_counter() - wall0, _cpu_seconds(server.pid) - cpu0
    finally:
        server.kill()
        server.wait(timeout=30)
    messages = clients * frames
    return {"library": library, "clients": clients, "messages": messages, "wall_s": wall,
            "messages_per_s": messages / wall, "server_cpu_ms_per_message": 1000 * cpu / messages}


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "server":
    {"websockets": serve_websockets, "fastapi": serve_fastapi}[sys.argv[2]](int(sys.argv[3]))
