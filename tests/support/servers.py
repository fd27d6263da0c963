"""Servers the tests start: a folder or a handler served over HTTP on this machine."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def serving(out: Path, stderr: Any = subprocess.DEVNULL) -> Iterator[str]:
    """`factory serve` on an output folder, on a free port: its URL (ending in /)."""
    process = subprocess.Popen([sys.executable, "-m", "factory", "serve", str(out), "--port",
                                "0"], stdout=subprocess.PIPE, stderr=stderr, text=True)
    try:
        line = process.stdout.readline() if process.stdout else ""
        assert " at http://127.0.0.1:" in line, line
        yield line.split(" at ", 1)[1].split()[0]
    finally:
        process.terminate()
        process.wait()


@contextlib.contextmanager
def static_server(root: Path, log: list[str] | None = None) -> Iterator[str]:
    """The files under `root` served over HTTP on a free port (a stand-in index): its URL,
    ending in /. Each request's path is appended to `log`."""
    class Handler(SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(root), **kwargs)

        def log_message(self, *args: Any) -> None:
            pass

        def log_request(self, *args: Any) -> None:
            if log is not None:
                log.append(self.path)

    with http_server(Handler) as url:
        yield url


class _Server(ThreadingHTTPServer):
    """A client that hangs up before the answer is sent (the factory stops reading a file that
    outgrows its signed size) is not the server's error: no traceback in the suite's output."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


@contextlib.contextmanager
def http_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A server of `handler` on a free port, in a thread of this process: its URL."""
    server = _Server(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
