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
the server's off). Answering a page costs a few system calls (no link followed, one send
for a page's headers and body, threads kept for the next connection): benchmarks/serve_speed.py
compares it with pypiserver and Python's http.server on the same folder.
"""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import socket
import stat
import sys
import threading
import time
from functools import partial
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from .. import defaults
from ..outputs.files import content_type
from ..outputs.layout import PRIVATE_FOLDERS
from ..trust.credentials import escape_controls, redact, secret_values
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
    server: IndexServer
    # Written through a buffer the handler flushes after each response: a page's headers and
    # body leave in one send, not two (a bigger write, a wheel's, goes straight through).
    wbufsize = 1 << 16

    def __init__(self, *args: Any, root: Path, idle_timeout: float, header_timeout: float,
                 secrets: tuple[str, ...], **kwargs: Any) -> None:
        self.root = root
        self.header_timeout = header_timeout
        self.secrets = secrets
        # socketserver's own setting: a read that waits longer ends the connection.
        self.timeout = idle_timeout  # type: ignore[misc]
        super().__init__(*args, **kwargs)

    def handle_one_request(self) -> None:
        """One request, whose request line and headers must all arrive within header_timeout
        (a client trickling one byte at a time would otherwise hold its worker forever): the
        server's watchdog hangs up on it past that."""
        self.server.deadlines.watch(self.connection, self.header_timeout)
        try:
            super().handle_one_request()
        finally:
            self.server.deadlines.forget(self.connection)

    def parse_request(self) -> bool:
        parsed = super().parse_request()
        self.server.deadlines.forget(self.connection)
        return parsed

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
        mode = _inside(self.root, target, parts)
        if mode is None:  # missing, outside, or a name the system refuses (too long)
            self.send_error(HTTPStatus.NOT_FOUND)
            return
        if stat.S_ISDIR(mode):
            if not url_path.endswith("/"):
                self.send_response(HTTPStatus.MOVED_PERMANENTLY)
                self.send_header("Location", url_path + "/")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            page, kind = negotiate(self.headers.get("Accept"))
            handle = _open_regular(target / page)
            if handle is None and page != "index.html":
                page, kind = "index.html", "text/html; charset=utf-8"
                handle = _open_regular(target / page)
            self._send_file(target / page, handle, kind, body, vary=True)
            return
        handle = _open_regular(target) if stat.S_ISREG(mode) else None
        self._send_file(target, handle, content_type(target.name), body, vary=False)

    def _send_file(self, path: Path, handle: Any, kind: str, body: bool, vary: bool) -> None:
        if handle is None:
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
        line = redact(escape_controls(format % args), secrets=self.secrets)
        sys.stderr.write(f"{self.address_string()} - {line}\n")
        sys.stderr.flush()


def _inside(root: Path, target: Path, parts: list[str]) -> int | None:
    """The mode of `target` (root joined with `parts`) where it is inside `root`, else None.
    Each part is looked at without following it; only a part that is a link costs resolving
    the whole path (the factory writes no links: the common case is a few lstat calls)."""
    path = str(root)
    try:
        mode = stat.S_IFDIR if parts else os.stat(path).st_mode  # root: a folder, resolved
        for part in parts:
            path = f"{path}/{part}"
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode):
                target.resolve().relative_to(root)
                return os.stat(target).st_mode
    except (ValueError, OSError):
        return None
    return mode


def _open_regular(path: Path) -> Any:
    """`path` opened for reading when it is a regular file and not a link, else None."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        return None
    return os.fdopen(descriptor, "rb", buffering=0)


class Deadlines:
    """The connections whose request must be read by a time, and one thread that hangs up on
    those past it, checking every `tick` seconds. (One thread for the server, not a timer per
    request: starting a thread for each request halved the requests a server answers.)"""

    def __init__(self, tick: float = 0.5) -> None:
        self._due: dict[socket.socket, float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._tick = tick
        self._thread = threading.Thread(target=self._run, name="serve-deadlines", daemon=True)
        self._thread.start()

    def watch(self, connection: socket.socket, seconds: float) -> None:
        with self._lock:
            self._due[connection] = time.monotonic() + seconds

    def forget(self, connection: socket.socket) -> None:
        with self._lock:
            self._due.pop(connection, None)

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self._tick):
            now = time.monotonic()
            with self._lock:
                late = [connection for connection, due in self._due.items() if due <= now]
                for connection in late:
                    del self._due[connection]
            for connection in late:
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)


class IndexServer(ThreadingHTTPServer):
    """Each connection served by a thread of its own, at most `workers` at once and
    `per_client` from one address (None: no such limit): one more is answered 503 and closed at
    once. A thread that has served its connection waits for the next one (`_IDLE_SECONDS`)
    before it ends, so a busy server does not start a thread per connection. (By hand:
    concurrent.futures' pool joins its threads when the interpreter exits, which a client
    holding a connection open would delay.) A handler that fails is one line in the log,
    never a traceback."""

    daemon_threads = True
    request_queue_size = 128  # connections the kernel holds before accept()
    _IDLE_SECONDS = 30.0

    def __init__(self, address: tuple[str, int], handler: Any, workers: int,
                 per_client: int | None) -> None:
        super().__init__(address, handler)
        self.deadlines = Deadlines()
        self._slots = workers
        self._per_client = per_client
        self._held: dict[str, int] = {}  # client address -> its connections being served
        self._serving = 0  # connections being served, all clients
        self._idle = 0  # threads waiting for a connection and not yet promised one
        self._work: queue.SimpleQueue[tuple[Any, Any]] = queue.SimpleQueue()
        self._lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        client = client_address[0]
        with self._lock:
            taken = self._held.get(client, 0)
            admitted = self._serving < self._slots and \
                (self._per_client is None or taken < self._per_client)
            if admitted:
                self._held[client] = taken + 1
                self._serving += 1
                start = self._idle == 0
                self._idle -= 0 if start else 1
        if not admitted:
            with contextlib.suppress(OSError):
                request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                                b"Retry-After: 1\r\nConnection: close\r\n\r\n")
            self.shutdown_request(request)
            return
        self._work.put((request, client_address))
        if start:
            threading.Thread(target=self._serve_connections, daemon=True).start()

    def _serve_connections(self) -> None:
        """Serve connections as they are handed over; end after waiting for one in vain, unless
        one was promised to this thread meanwhile."""
        while True:
            try:
                request, client_address = self._work.get(timeout=self._IDLE_SECONDS)
            except queue.Empty:
                with self._lock:
                    if self._idle > 0:
                        self._idle -= 1
                        return
                continue
            self.process_request_thread(request, client_address)
            with self._lock:
                self._idle += 1

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._lock:
                self._serving -= 1
                left = self._held[client_address[0]] - 1
                if left:
                    self._held[client_address[0]] = left
                else:
                    del self._held[client_address[0]]

    def server_close(self) -> None:
        super().server_close()
        self.deadlines.stop()

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
                      header_timeout=header_timeout, secrets=tuple(secret_values()))
    return IndexServer((host, port), handler, workers, per_client)
