"""WebSocket server speaking Wenet's runtime protocol over one multi-stream recognizer.

One asyncio event loop owns the connections; one decoding thread owns the
:class:`~asr.serve.multi_stream.MultiStreamRecognizer` and runs rounds (``decode()``: all
streams with a whole chunk in one batched step) whenever audio arrives. Each
connection has its own stream and a bounded reply queue drained by its own
sender task, so a client that stops reading cannot stall the others. A start
message's own hotword list is compiled in a worker thread (one list at a time,
within ``hotword_compile_s`` of the request, waiting included), so a long list
delays neither the other connections' ``server_ready`` nor their replies.

Bad clients get a ``{"status": "failed", "message": ...}`` reply and a close
(code 1008), or a clean close: malformed JSON, unknown signals, audio before
start, odd byte counts, audio arriving faster than it is decoded (backlog over
``max_backlog_s``: the per-connection memory bound), a reply queue that is not
read, hotword lists over ``max_hotwords`` phrases or with a phrase over ``max_hotword_chars`` characters
(or one the model cannot spell), frames over ``max_frame_bytes`` (closed by the WebSocket layer, code 1009),
a hotword list not compiled within ``hotword_compile_s``, no message for ``idle_timeout_s``
(before the start signal, or while the server waits for audio or the end signal), connections over
``max_connections`` or over ``max_connections_per_client`` from one address (code 1013). A client
that disconnects mid-utterance just has its stream removed.

A WebSocket handshake from a web page of another origin than the server's own (or those of
``ServerConfig.allowed_origins``) is refused with HTTP 403 (:mod:`asr.serve.origin`); clients that send
no ``Origin`` header (Wenet's, any program) are not browsers and connect as before.

A client may declare the rate of its PCM in the URL (``ws://host:port/?sample_rate=16000``, as
the page does); a rate other than the model's gets a ``failed`` reply and a close (1008)
instead of being decoded as if it were the model's. With ``ServerConfig.web`` the same
port also answers plain HTTP GETs with the microphone page (:mod:`asr.serve.pages`).

A stream whose decoding fails (e.g. an ``abs_learned`` model past its position
table under continuous decoding) gets ``{"status": "failed", "message": ...}``
and a close (code 1011) while the other streams of the same round go on.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from asr.decode.hotwords import DEFAULT_MAX_PHRASE_CHARS, DEFAULT_MAX_PHRASES, HotwordError, HotwordLimits
from urllib.parse import parse_qs, urlsplit

from asr.serve.origin import OriginPolicy, is_loopback
from asr.serve.pages import StaticPages, is_websocket_upgrade
from asr.serve.protocol import (
    End,
    ProtocolError,
    Start,
    failed,
    parse_text,
    pcm16_to_float,
    result_message,
    server_ready,
    speech_end,
)
from asr.serve.multi_stream import MultiStreamRecognizer
from asr.serve.stream import Stream

log = logging.getLogger(__name__)

CLOSE_POLICY, CLOSE_BUSY, CLOSE_NORMAL, CLOSE_SERVER_ERROR = 1008, 1013, 1000, 1011


@dataclass(frozen=True)
class ServerConfig:
    """Limits and address. Binds to loopback unless ``host`` says otherwise."""

    host: str = "127.0.0.1"
    port: int = 10086  # Wenet's default
    max_connections: int = 32
    max_frame_bytes: int = 1 << 20
    max_backlog_s: float = 10.0
    max_nbest: int = 10
    max_queued_replies: int = 256
    close_timeout_s: float = 10.0  # wait for the client's close frame, then drop the TCP connection
    max_hotwords: int = DEFAULT_MAX_PHRASES  # phrases in one start message's hotword list
    max_hotword_chars: int = DEFAULT_MAX_PHRASE_CHARS  # characters in one of them
    web: bool = False  # also serve the microphone page (asr/serve/web) over HTTP on the same port
    # No message for this long while the client has the turn (before start, or audio not yet ended): closed.
    # A microphone client sends a piece every 100 ms, so a silent socket is not a user.
    idle_timeout_s: float = 20.0
    # Behind a reverse proxy every client has the proxy's address: raise this to max_connections there.
    max_connections_per_client: int = 8
    hotword_compile_s: float = 10.0  # a start message's own list compiled within this, its wait included
    # Web origins whose pages may connect besides the server's own ("*": any); handshakes without an
    # Origin header (programs, not browsers) always may (asr.serve.origin).
    allowed_origins: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if (self.max_connections < 1 or self.max_frame_bytes < 2 or self.max_nbest < 1 or self.max_queued_replies < 1
                or self.max_connections_per_client < 1):
            raise ValueError(f"server limits must be positive: {self}.")
        for name in ("close_timeout_s", "max_backlog_s", "idle_timeout_s", "hotword_compile_s"):
            if not 0 < getattr(self, name) < math.inf:
                raise ValueError(f"{name} ({getattr(self, name)}) must be a finite number > 0.")
        HotwordLimits(self.max_hotwords, self.max_hotword_chars)  # validates them
        OriginPolicy(self.allowed_origins)  # validates them


def _declared_rate_error(path: str, expected: int) -> str | None:
    """The refusal for a URL's ``sample_rate`` other than ``expected`` (None: none declared, or the same)."""
    declared = parse_qs(urlsplit(path).query).get("sample_rate")
    if declared is None or declared == [str(expected)]:
        return None
    return (f"sample_rate {', '.join(declared)} declared in the URL; this server decodes 16-bit PCM at "
            f"{expected} Hz: resample to {expected} Hz and connect with ?sample_rate={expected}")


class _Close:
    """Reply-queue item: close the connection with this code after the replies before it."""

    def __init__(self, code: int, reason: str) -> None:
        self.code, self.reason = code, reason


class _Session:
    """One connection's protocol state."""

    def __init__(self, ws: ServerConnection, queue_size: int) -> None:
        self.ws = ws
        self.stream: Stream | None = None
        self.nbest = 1
        self.continuous = False
        self.segment_times = False
        self.ended = False  # "end" signal received
        self.stopped = False  # recognition over (speech_end sent or being sent)
        self.outbox: asyncio.Queue = asyncio.Queue(queue_size)
        self.sender: asyncio.Task | None = None


class AsrServer:
    """Serve ``recognizer`` over WebSockets; ``async with`` or :meth:`start` / :meth:`stop`."""

    def __init__(self, recognizer: MultiStreamRecognizer, config: ServerConfig | None = None) -> None:
        self.recognizer = recognizer
        self.config = config or ServerConfig()
        self._sessions: dict[Stream, _Session] = {}
        self._connections = 0
        self._per_client: Counter[str] = Counter()  # open connections per client address
        self._wake = asyncio.Event()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="asr-decode")
        # One list at a time: a flood of long lists costs one core's share, and lists past their budget
        # that have not started are dropped unstarted.
        self._compiler = ThreadPoolExecutor(max_workers=1, thread_name_prefix="asr-hotwords")
        self._server = None
        self._decoder: asyncio.Task | None = None
        self.rejected_connections = 0
        self.unread_closed = 0  # connections closed because their reply queue was full (not read)
        self.idle_closed = 0  # connections closed for sending nothing within idle_timeout_s
        self.origin_refused = 0  # handshakes refused for coming from another web origin
        self._pages: StaticPages | None = None
        self._origins: OriginPolicy | None = None

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        return self._server.sockets[0].getsockname()[1]

    async def start(self) -> AsrServer:
        self._pages = StaticPages(self.recognizer.sample_rate) if self.config.web else None
        self._origins = OriginPolicy(self.config.allowed_origins, loopback_only=is_loopback(self.config.host))
        self._server = await serve(
            self._handle, self.config.host, self.config.port, max_size=self.config.max_frame_bytes,
            close_timeout=self.config.close_timeout_s, process_request=self._process_request,
        )
        self._decoder = asyncio.create_task(self._decode_loop())
        return self

    async def stop(self) -> None:
        self._server.close()
        await self._server.wait_closed()
        self._decoder.cancel()
        self._compiler.shutdown(wait=True, cancel_futures=True)
        self._executor.shutdown(wait=True)

    async def __aenter__(self) -> AsrServer:
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    async def serve_forever(self) -> None:
        await self._server.serve_forever()

    def open_counts(self) -> dict[str, int]:
        """What the server holds for open connections (each 0 once they all closed): for soak tests."""
        return {"open connections": self._connections, "sessions": len(self._sessions),
                "client addresses": len(self._per_client)}

    # ---- connections -----------------------------------------------------------

    def _process_request(self, connection, request):
        """Before a handshake: a page from another origin gets 403; plain HTTP GETs get the page (``web``)."""
        if is_websocket_upgrade(request):
            refused = self._origins.process_request(connection, request)
            if refused is not None:
                self.origin_refused += 1
                log.warning("refused a WebSocket handshake from origin %r", request.headers.get("Origin"))
            return refused
        return self._pages.process_request(connection, request) if self._pages is not None else None


    async def _handle(self, ws: ServerConnection) -> None:
        config = self.config
        client = (ws.remote_address or ("?",))[0]
        refusal = None
        if self._connections >= config.max_connections:
            refusal = f"server busy: {config.max_connections} connections already open"
        elif self._per_client[client] >= config.max_connections_per_client:
            refusal = (f"too many connections from {client}: {self._per_client[client]} already open "
                       f"(limit {config.max_connections_per_client} per client address)")
        if refusal:
            self.rejected_connections += 1
            await ws.send(failed(refusal))
            await ws.close(CLOSE_BUSY, "too many connections")
            return
        wrong_rate = _declared_rate_error(ws.request.path, self.recognizer.sample_rate)
        if wrong_rate:
            await ws.send(failed(wrong_rate))
            await ws.close(CLOSE_POLICY, "unexpected sample rate")
            return
        self._connections += 1
        self._per_client[client] += 1
        session = _Session(ws, config.max_queued_replies)
        session.sender = asyncio.create_task(self._send_replies(session))
        try:
            while True:
                try:  # (a timeout scope, not wait_for's task: a message already queued is taken at once)
                    async with asyncio.timeout(config.idle_timeout_s):
                        message = await ws.recv()
                except TimeoutError:
                    if session.ended and not session.stopped:
                        continue  # the server's turn: the client waits for its final result
                    if not session.stopped:
                        self.idle_closed += 1
                        raise ProtocolError(self._idle_message(session)) from None
                    break  # replies done but not taken: a client that neither reads nor closes
                if session.stopped:
                    continue  # Wenet ignores audio after recognition stopped
                if isinstance(message, str):
                    await self._on_text(session, message)
                else:
                    self._on_audio(session, message)
        except ProtocolError as err:
            self._deliver(session, [failed(str(err)), _Close(CLOSE_POLICY, "protocol error")])
        except ConnectionClosed:
            pass
        finally:
            await self._drain_or_drop(session)
            if session.stream is not None:
                self._sessions.pop(session.stream, None)
                self.recognizer.remove_stream(session.stream)
                # The session may outlive the connection in a reference cycle (the connection keeps the exception
                # that closed it, whose traceback holds this frame) until a full garbage collection: without its
                # stream it holds no hotword graph (a long list's is ~80 MB) and no audio.
                session.stream = None
            self._connections -= 1
            self._per_client[client] -= 1
            if not self._per_client[client]:
                del self._per_client[client]

    def _idle_message(self, session: _Session) -> str:
        limit = f"{self.config.idle_timeout_s:g} s"
        waited = "the start signal" if session.stream is None else "audio or the end signal"
        return f"idle timeout: no message for {limit} (the server's limit) while waiting for {waited}; closing"

    async def _open_stream(self, start: Start) -> Stream:
        """A stream with the start signal's hotwords; a list of its own is compiled in the hotword worker."""
        HotwordLimits(self.config.max_hotwords, self.config.max_hotword_chars).check(start.hotwords)
        if not start.hotwords:  # the server's own list, if any, is compiled once, when the recognizer is made
            return self.recognizer.create_stream()
        job = self._compiler.submit(self.recognizer.create_stream, start.hotwords)
        budget = self.config.hotword_compile_s
        try:  # (at the budget wait_for cancels its waiter: a late result or error is dropped with it)
            return await asyncio.wait_for(asyncio.wrap_future(job), budget)
        except TimeoutError:
            if not job.cancel():  # running: its stream, once made, has no connection
                job.add_done_callback(self._drop_late_stream)
            raise HotwordError(f"hotword list not compiled within {budget:g} s (the server's limit; other lists "
                               f"may be ahead of it): send a shorter list, or retry later") from None

    def _drop_late_stream(self, job: Future) -> None:
        if not job.cancelled() and job.exception() is None:
            self.recognizer.remove_stream(job.result())

    async def _on_text(self, session: _Session, message: str) -> None:
        signal = parse_text(message, self.config.max_nbest)
        if isinstance(signal, Start):
            if session.stream is not None:
                raise ProtocolError("start signal received twice on one connection")
            session.nbest, session.continuous = signal.nbest, signal.continuous_decoding
            session.segment_times = signal.segment_times
            try:
                session.stream = await self._open_stream(signal)
            except HotwordError as err:
                raise ProtocolError(str(err)) from None
            self._sessions[session.stream] = session
            self._deliver(session, [server_ready()])
        elif isinstance(signal, End):
            if session.stream is None:
                raise ProtocolError("end signal before the start signal")
            if not session.ended:
                session.ended = True
                session.stream.finish()
                self._wake.set()

    def _on_audio(self, session: _Session, data: bytes) -> None:
        if session.stream is None:
            raise ProtocolError("start signal is expected before binary data")
        if session.ended:
            raise ProtocolError("binary data after the end signal")
        samples = pcm16_to_float(data)
        stream = session.stream
        if stream.error is not None:
            return  # its failure reply is on the way; the audio has nowhere to go
        stream.accept_waveform(self.recognizer.sample_rate, samples)
        if stream.backlog_s > self.config.max_backlog_s:
            raise ProtocolError(
                f"audio arrives faster than it is decoded: {stream.backlog_s:.1f} s waiting "
                f"(limit {self.config.max_backlog_s} s); send audio in real time"
            )
        self._wake.set()

    async def _send_replies(self, session: _Session) -> None:
        while True:
            item = await session.outbox.get()
            if isinstance(item, _Close):
                await session.ws.close(item.code, item.reason)
                return
            await session.ws.send(item)

    async def _drain_or_drop(self, session: _Session) -> None:
        """Let queued replies go out to a client that is still there; drop them for one that left."""
        if session.ws.state.name == "OPEN" and not session.sender.done():
            try:
                await asyncio.wait_for(asyncio.shield(session.sender), timeout=5.0)
            except (asyncio.TimeoutError, ConnectionClosed):
                pass
        session.sender.cancel()

    def _deliver(self, session: _Session, items: list) -> None:
        if session.sender is None or session.sender.done():
            return
        for item in items:
            try:
                session.outbox.put_nowait(item)
            except asyncio.QueueFull:
                log.warning("client does not read its replies; closing it")
                self.unread_closed += 1
                session.sender.cancel()
                session.stopped = True
                asyncio.ensure_future(session.ws.close(CLOSE_POLICY, "replies not read"))
                return

    # ---- decoding ----------------------------------------------------------------

    async def _decode_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                replies = await loop.run_in_executor(self._executor, self._decode_round)
            except Exception:  # a decoding bug must not kill the server for everyone
                log.exception("decode round failed")
                continue
            for session, items in replies:
                self._deliver(session, items)
            if self.recognizer.has_work():
                self._wake.set()

    def _decode_round(self) -> list[tuple[_Session, list]]:
        """Runs in the decoding thread: one ``decode()`` and the replies it produces."""
        replies = []
        for stream in self.recognizer.decode():
            session = self._sessions.get(stream)
            if session is None:  # the connection closed during the round
                continue
            items: list = []
            if stream.error is not None:
                session.stopped = True
                items += [failed(f"recognition failed: {stream.error}"),
                          _Close(CLOSE_SERVER_ERROR, "recognition failed")]
            elif stream.is_endpoint() or stream.is_done():
                items.append(result_message(stream.result(session.nbest), session.nbest, session.segment_times))
                if stream.is_endpoint() and session.continuous:
                    stream.reset()
                else:
                    session.stopped = True
                    items += [speech_end(), _Close(CLOSE_NORMAL, "speech end")]
            elif stream.new_frames:
                result = stream.result(session.nbest)
                if result.text:  # as Wenet: a partial only once something was decoded
                    items.append(result_message(result, session.nbest))
            if items:
                replies.append((session, items))
        return replies
