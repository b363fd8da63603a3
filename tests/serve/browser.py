"""Drive the microphone page in Debian's Chromium (through Playwright) against a server on loopback.

The browser's microphone is a WAV file (``--use-file-for-fake-audio-capture``), played
once from the moment the page opens it. Chromium is Debian's (``apt-get install -y
chromium``), never a browser Playwright downloads; Playwright is the Python package
(``pip install playwright``). Tests skip with a reason when either is missing.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from asr.serve.server import AsrServer

STATE_JS = "document.getElementById('status').dataset.state"


def chromium_path() -> str | None:
    """Debian's chromium (or $ASR_CHROMIUM), or None."""
    return os.environ.get("ASR_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


def browser_skip_reason() -> str | None:
    if chromium_path() is None:
        return "no chromium: apt-get install -y chromium (Debian's browser; the page tests never download one)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "no playwright: pip install playwright (or pip install -e '.[browser]')"
    return None


needs_browser = pytest.mark.skipif(browser_skip_reason() is not None, reason=browser_skip_reason() or "")


@contextmanager
def running(server: AsrServer):
    """Run ``server`` on its own event loop in a thread (Playwright's sync API owns the test thread); yields it."""
    loop = asyncio.new_event_loop()
    started = threading.Event()

    def main() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(server.start())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=main, name="asr-server", daemon=True)
    thread.start()
    if not started.wait(60):
        raise RuntimeError("the server did not start within 60 s")
    try:
        yield server
    finally:
        stop_server(server, loop)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)


def stop_server(server: AsrServer, loop: asyncio.AbstractEventLoop) -> None:
    """Stop ``server`` from another thread (idempotent)."""
    if getattr(server, "_stopped_by_test", False):
        return
    server._stopped_by_test = True
    asyncio.run_coroutine_threadsafe(server.stop(), loop).result(30)


@dataclass
class PageRun:
    """What the page showed, and what the server sent it."""

    finals: list[str]  # sentences of the final results shown, in order
    breaks: int  # endpoint dividers shown
    word_times: list[tuple[str, int, int]]  # (word, start ms, end ms) of every word shown
    status_state: str
    status_text: str
    capture_info: str
    frames: list[str] = field(default_factory=list)  # text frames received on the page's WebSocket
    screenshot: bytes | None = None


@contextmanager
def browser(wav: Path):
    """A headless Chromium whose microphone plays ``wav`` once (WAV, 16-bit PCM)."""
    from playwright.sync_api import sync_playwright

    args = ["--use-fake-device-for-media-stream", f"--use-file-for-fake-audio-capture={wav}%noloop",
            "--use-fake-ui-for-media-stream"]
    with sync_playwright() as pw:
        instance = pw.chromium.launch(executable_path=chromium_path(), args=args)
        try:
            yield instance
        finally:
            instance.close()


def open_page(instance, url: str):
    # bypass_csp: the page forbids eval, which Playwright's wait_for_function uses
    page = instance.new_context(bypass_csp=True).new_page()
    frames: list[str] = []
    page.on("websocket", lambda ws: ws.on("framereceived", lambda f: frames.append(f) if isinstance(f, str) else None))
    page.goto(url)
    return page, frames


def read_page(page, frames: list[str], screenshot: bool = False) -> PageRun:
    finals = page.eval_on_selector_all("#finals div.final", "els => els.map(e => e.dataset.sentence)")
    words = page.eval_on_selector_all(
        "#finals .word", "els => els.map(e => [e.firstChild.textContent.trim(), +e.dataset.start, +e.dataset.end])")
    return PageRun(
        finals=finals, breaks=len(page.query_selector_all("#finals div.break")),
        word_times=[tuple(w) for w in words], status_state=page.evaluate(STATE_JS),
        status_text=page.text_content("#status"), capture_info=page.text_content("#capture-info"),
        frames=list(frames), screenshot=page.screenshot(full_page=True) if screenshot else None,
    )


def speak_into_page(wav: Path, url: str, audio_s: float, tail_s: float = 1.5, timeout_s: float = 60.0,
                    setup=None, screenshot: bool = False, until=None) -> PageRun:
    """Open the page, press Start, let ``wav`` play (``audio_s`` + ``tail_s``), press Stop, wait for the end.

    ``setup(page)`` runs before Start (e.g. to tick the browser-processing boxes). ``until()``, when given,
    must also hold before Stop (polled for up to ``timeout_s``): on a loaded machine Chromium's fake capture
    device runs behind the wall clock, so "the file has played" is a measured condition, not a sleep.
    """
    with browser(wav) as instance:
        page, frames = open_page(instance, url)
        if setup is not None:
            setup(page)
        page.click("#start")
        page.wait_for_function(f"['listening', 'error'].includes({STATE_JS})", timeout=timeout_s * 1000)
        if page.evaluate(STATE_JS) == "listening":
            time.sleep(audio_s + tail_s)
            deadline = time.monotonic() + timeout_s
            while until is not None and not until() and time.monotonic() < deadline:
                time.sleep(0.1)
            page.click("#stop")
        page.wait_for_function(f"['done', 'error'].includes({STATE_JS})", timeout=timeout_s * 1000)
        return read_page(page, frames, screenshot)
