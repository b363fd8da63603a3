"""Which web pages may open a WebSocket to the server: its own, the origins the user allows, and any
client that sends no ``Origin`` (Wenet's runtime clients, ``scripts/client.py``, other programs).

A browser lets any page open a WebSocket to any address, 127.0.0.1 included (WebSockets have no
same-origin policy), and sends the page's origin in the handshake. Without a check, a site the user
visits could stream to a local server and read its transcripts (cross-site WebSocket hijacking).
Programs that are not browsers send no ``Origin``: a handshake without one is not cross-site.

A handshake with an ``Origin`` is accepted when the origin is the server's own address as the browser
reached it (the ``Host`` header: the page ``--web`` serves), or one of ``allowed`` (``--allow-origin``;
``*``: any). A server bound to loopback takes its own origin only under a loopback name (``127.0.0.1``,
``localhost``, ``[::1]``): a site whose name an attacker re-points at 127.0.0.1 (DNS rebinding) has
another ``Host``. Anything else is refused with HTTP 403 before the WebSocket opens.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from urllib.parse import urlsplit

from websockets.datastructures import Headers
from websockets.http11 import Request, Response

ANY_ORIGIN = "*"
DEFAULT_PORTS = {"http": 80, "https": 443}
LOOPBACK_NAMES = ("localhost",)


def normalize_origin(origin: str) -> str:
    """``scheme://host[:port]`` in lower case, the scheme's default port left out; ValueError for anything
    that is not an http(s) origin (a path, a query, another scheme, ``null``)."""
    parts = urlsplit(origin.strip())
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = -1
    if scheme not in DEFAULT_PORTS or not parts.hostname or parts.path not in ("", "/") or parts.query or port == -1:
        raise ValueError(f"origin {origin!r} is not scheme://host[:port] with scheme http or https "
                         "(e.g. https://example.com or http://127.0.0.1:8000)")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{scheme}://{host}" + ("" if port in (None, DEFAULT_PORTS[scheme]) else f":{port}")


def is_loopback(host: str) -> bool:
    """``host`` (a name or an address, IPv6 with or without brackets) names this machine's loopback."""
    host = host.strip("[]").lower()
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class OriginPolicy:
    """The origin check of the server's WebSocket handshakes (see the module docstring).

    Args:
        allowed: origins accepted besides the server's own (``*``: every origin); each is checked here.
        loopback_only: the server is bound to loopback, so its own origin is a loopback name.
    """

    def __init__(self, allowed: Iterable[str] = (), loopback_only: bool = True) -> None:
        allowed = list(allowed)
        self.any = ANY_ORIGIN in allowed
        self.allowed = frozenset(normalize_origin(o) for o in allowed if o != ANY_ORIGIN)
        self.loopback_only = loopback_only

    def refusal(self, request: Request) -> str | None:
        """Why the handshake ``request`` is refused; None when it is accepted."""
        origin = request.headers.get("Origin")
        if origin is None or self.any:
            return None
        try:
            normalized = normalize_origin(origin)
        except ValueError:
            return f"origin {origin!r} may not connect (the server takes its own page's origin)"
        if normalized in self.allowed or self._is_own(normalized, request.headers.get("Host", "")):
            return None
        return (f"origin {origin} may not connect: the server takes its own page's origin and those given with "
                f"--allow-origin (start it with --allow-origin {normalized} to let that page connect)")

    def _is_own(self, origin: str, host_header: str) -> bool:
        """``origin`` is the address the request was sent to (its ``Host``), as its own page's would be."""
        scheme = origin.split("://", 1)[0]
        try:
            own = normalize_origin(f"{scheme}://{host_header}")
        except ValueError:
            return False
        if self.loopback_only and not is_loopback(urlsplit(own).hostname or ""):
            return False
        return own == origin

    def process_request(self, connection, request: Request) -> Response | None:
        """A ``process_request`` hook: 403 for a refused handshake, None to let it go on."""
        why = self.refusal(request)
        if why is None:
            return None
        body = f"{why}\n".encode()
        headers = Headers([("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))])
        return Response(403, "Forbidden", headers, body)
