"""The microphone page: static files served over plain HTTP by the WebSocket server itself.

``scripts/serve.py --web`` answers an ordinary GET on the server's port with the page
(``asr/serve/web/``: HTML, CSS and JavaScript shipped in the package, no build step, no
CDN) and upgrades WebSocket requests on the same port as before. One process, one
port: the page connects back to the address it was loaded from, and
``http://127.0.0.1:PORT/`` is a secure context, so the browser lets it open the
microphone without TLS.

``config.json`` tells the page the rate the server decodes (it resamples to it) and
says the protocol is Wenet's.
"""

from __future__ import annotations

import json
from importlib import resources
from urllib.parse import urlsplit

from websockets.datastructures import Headers
from websockets.http11 import Request, Response

WEB_PACKAGE = "asr.serve"
WEB_FOLDER = "web"
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",  # module scripts and AudioWorklet need a JS type
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
}
# Everything from this origin, nothing from elsewhere; ws: to the same host is 'self' in CSP 3.
CSP = ("default-src 'self'; connect-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "object-src 'none'; base-uri 'none'; frame-ancestors 'none'")


def _load_files() -> dict[str, bytes]:
    """URL path -> bytes for every file of the page (read once: a few KB)."""
    folder = resources.files(WEB_PACKAGE).joinpath(WEB_FOLDER)
    files = {f"/{item.name}": item.read_bytes() for item in folder.iterdir()
             if item.is_file() and "." + item.name.rsplit(".", 1)[-1] in CONTENT_TYPES}
    if "/index.html" not in files:
        raise FileNotFoundError(f"the page's index.html is missing from {folder}: reinstall the package")
    files["/"] = files["/index.html"]
    return files


def is_websocket_upgrade(request: Request) -> bool:
    return "websocket" in request.headers.get("Upgrade", "").lower()


class StaticPages:
    """``process_request`` hook for :func:`websockets.asyncio.server.serve`.

    GET of a page file -> 200 with its type; any other plain HTTP path -> 404 (text);
    WebSocket upgrades -> None (the handshake goes on).
    """

    def __init__(self, sample_rate: int) -> None:
        self.files = _load_files()
        self.files["/config.json"] = json.dumps({"sample_rate": sample_rate, "protocol": "wenet"}).encode()

    def process_request(self, connection, request: Request) -> Response | None:
        if is_websocket_upgrade(request):
            return None
        path = urlsplit(request.path).path
        body = self.files.get(path)
        if body is None:
            return self._response(404, "Not Found", b"not found: the page is at /\n", "text/plain; charset=utf-8")
        suffix = "." + ("index.html" if path == "/" else path).rsplit(".", 1)[-1]
        return self._response(200, "OK", body, CONTENT_TYPES[suffix])

    @staticmethod
    def _response(status: int, reason: str, body: bytes, content_type: str) -> Response:
        headers = Headers([
            ("Content-Type", content_type), ("Content-Length", str(len(body))), ("Cache-Control", "no-store"),
            ("X-Content-Type-Options", "nosniff"), ("Content-Security-Policy", CSP),
        ])
        return Response(status, reason, headers, body)
