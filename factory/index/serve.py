"""`factory serve`: the output folder over HTTP, for pip, uv and browsers.

A folder holding index.html and index.json is a simple-repository page: the JSON form is sent
when the client's Accept header prefers application/vnd.pypi.simple.v1+json (PEP 691), the
HTML form otherwise. A page URL without its trailing slash is redirected to it; a project that
does not exist is a 404; nothing outside the served folder is ever read, and neither are its
private folders (the build logs, the factory's records). Files are streamed
(a wheel of gigabytes is never held in memory), a connection that sends nothing for
`idle_timeout` seconds, or whose request line and headers take longer than `header_timeout`,
is closed, at most `workers` connections are served at once and at most `per_client` of them
from one client address: hundreds of slow connections from one client leave the others
answered as before (benchmarks/serve_slow.py). Behind a reverse proxy every connection comes
from the proxy's address; such a proxy keeps its own per-client limits (`per_client=None` turns
the server's off).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import sys
import threading
from functools import partial
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from .. import defaults
from ..outputs.files import content_type
from ..outputs.layout import PRIVATE_FOLDERS
from ..trust.credentials import escape_controls, redact
from ..trust.safety import served_parts
from .pages import HTML_CONTENT_TYPE, JSON_CONTENT_TYPE

__all__ = ["IndexHandler", "IndexServer", "make_server", "negotiate"]

_TYPES = {
    JSON_CONTENT_TYPE: ("index.json", JSON_CONTENT_TYPE),
    HTML_CONTENT_TYPE: ("index.html", HTML_CONTENT_TYPE),
    "text/html": ("index.html", "text/html; charset=utf-8"),
}


def negotiate(accept: str | None) -> tuple[str, str]:
    """(page file, content type) for an Accept header: the form the client rates highest among
    PEP 691's JSON, PEP 691's HTML and text/html. A form named outright beats one reached through
    a wildcard at the same rating; named forms tie in favour of JSON, wildcards (a browser's or
    curl's */*) in favour of text/html, and no header at all gets text/html."""
    scores: dict[str, tuple[float, int]] = {}
    for part in (accept or "").split(","):
        media, *params = [piece.strip().lower() for piece in part.split(";")]
        media = media.replace(".latest+", ".v1+")  # PEP 691's alias for the newest version
        quality = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        for candidate in _TYPES:
            if media == candidate:
                named = 1
            elif media in ("*/*", f"{candidate.split('/')[0]}/*"):
                named = 0
            else:
                continue
            scores[candidate] = max(scores.get(candidate, (0.0, 0)), (quality, named))
    preference = [JSON_CONTENT_TYPE, HTML_CONTENT_TYPE, "text/html"]

    def rank(candidate: str) -> tuple[float, int, int]:
        quality, named = scores[candidate]
        order = preference.index(candidate) if named else -preference.index(candidate)
        return quality, named, -order

    acceptable = [c for c in scores if scores[c][0] > 0]
    chosen = max(acceptable, key=rank) if acceptable else "text/html"
    return _TYPES[chosen]


class IndexHandler(BaseHTTPRequestHandler):
    server_version = "kernel-wheel-factory"

    def __init__(self, *args: Any, root: Path, idle_timeout: float, header_timeout: float,
                 **kwargs: Any) -> None:
        self.root = root
        self.header_timeout = header_timeout
        # socketserver's own setting: a read that waits longer ends the connection.
        self.timeout = idle_timeout  # type: ignore[misc]
        super().__init__(*args, **kwargs)

    def handle_one_request(self) -> None:
        """One request, whose request line and headers must all arrive within header_timeout
        (a client trickling one byte at a time would otherwise hold its worker forever)."""
        cut = threading.Timer(self.header_timeout, self._hang_up)
        self._headers_read = cut
        cut.start()
        try:
            super().handle_one_request()
        finally:
            cut.cancel()

    def parse_request(self) -> bool:
        parsed = super().parse_request()
        self._headers_read.cancel()
        return parsed

    def _hang_up(self) -> None:
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def do_HEAD(self) -> None:
        self._respond(body=False)

    def do_GET(self) -> None:
        self._respond(body=True)

    def _respond(self, body: bool) -> None:
        url_path = unquote(urlsplit(self.path).path)
        parts = served_parts(url_path)
        if parts is None or (parts and parts[0] in PRIVATE_FOLDERS):
            self.send_error(HTTPStatus.NOT_FOUND)
            return
        target = self.root.joinpath(*parts)
        try:
            target.resolve().relative_to(self.root)
            is_dir = target.is_dir()
        except (ValueError, OSError):  # outside, or a name the system refuses (too long)
            self.send_error(HTTPStatus.NOT_FOUND)
            return
        if is_dir:
            if not url_path.endswith("/"):
                self.send_response(HTTPStatus.MOVED_PERMANENTLY)
                self.send_header("Location", url_path + "/")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            page, kind = negotiate(self.headers.get("Accept"))
            if not (target / page).is_file():
                page, kind = "index.html", "text/html; charset=utf-8"
            self._send_file(target / page, kind, body, vary=True)
            return
        try:
            is_file = target.is_file()
        except OSError:
            is_file = False
        if not is_file:
            self.send_error(HTTPStatus.NOT_FOUND)
            return
        self._send_file(target, content_type(target.name), body, vary=False)

    def _send_file(self, path: Path, kind: str, body: bool, vary: bool) -> None:
        try:
            # Opened apart from the `with`: only a failure to open is a 404, not one to send.
            handle = open(path, "rb")  # noqa: SIM115
        except OSError:
            self.send_error(HTTPStatus.NOT_FOUND)
            return
        with handle:
            self._send_open_file(path, handle, kind, body, vary)

    def _send_open_file(self, path: Path, handle: Any, kind: str, body: bool,
                        vary: bool) -> None:
        size = os.fstat(handle.fileno()).st_size
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(size))
        if vary:
            self.send_header("Vary", "Accept")
            self.send_header("Cache-Control", "max-age=60")
        else:
            self.send_header("Cache-Control", "max-age=31536000, immutable"
                             if path.parent.name == "files" else "max-age=60")
        self.end_headers()
        if body:
            shutil.copyfileobj(handle, self.wfile, 1 << 20)

    def log_message(self, format: str, *args: Any) -> None:
        """One line per request, as a client sent it, but with control characters escaped (a
        request line may hold terminal escapes) and credentials masked."""
        sys.stderr.write(f"{self.address_string()} - {redact(escape_controls(format % args))}\n")
        sys.stderr.flush()


class IndexServer(ThreadingHTTPServer):
    """A thread per connection, at most `workers` at once and `per_client` from one address
    (None: no such limit): one more is answered 503 and closed at once. A handler that fails
    is one line in the log, never a traceback."""

    daemon_threads = True
    request_queue_size = 128  # connections the kernel holds before accept()

    def __init__(self, address: tuple[str, int], handler: Any, workers: int,
                 per_client: int | None) -> None:
        super().__init__(address, handler)
        self._slots = workers
        self._per_client = per_client
        self._held: dict[str, int] = {}  # client address -> its connections being served
        self._lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        client = client_address[0]
        with self._lock:
            taken = self._held.get(client, 0)
            admitted = sum(self._held.values()) < self._slots and \
                (self._per_client is None or taken < self._per_client)
            if admitted:
                self._held[client] = taken + 1
        if not admitted:
            with contextlib.suppress(OSError):
                request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                                b"Retry-After: 1\r\nConnection: close\r\n\r\n")
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._lock:
                left = self._held[client_address[0]] - 1
                if left:
                    self._held[client_address[0]] = left
                else:
                    del self._held[client_address[0]]

    def handle_error(self, request: Any, client_address: Any) -> None:
        kind = sys.exc_info()[0]
        sys.stderr.write(f"{client_address[0]} - the request failed "
                         f"({kind.__name__ if kind else 'unknown error'})\n")


def make_server(root: Path, host: str, port: int,
                idle_timeout: float = defaults.SERVE_IDLE_TIMEOUT,
                header_timeout: float = defaults.SERVE_HEADER_TIMEOUT,
                workers: int = defaults.SERVE_WORKERS,
                per_client: int | None = defaults.SERVE_PER_CLIENT) -> IndexServer:
    handler = partial(IndexHandler, root=root.resolve(), idle_timeout=idle_timeout,
                      header_timeout=header_timeout)
    return IndexServer((host, port), handler, workers, per_client)
