"""`factory serve`: the output folder over HTTP, for pip, uv and browsers.

A folder holding index.html and index.json is a simple-repository page: the JSON form is sent
when the client's Accept header prefers application/vnd.pypi.simple.v1+json (PEP 691), the
HTML form otherwise. A page URL without its trailing slash is redirected to it; a project that
does not exist is a 404; nothing outside the served folder is ever read.
"""

from __future__ import annotations

import mimetypes
import posixpath
import sys
from functools import partial
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

from .pages import HTML_CONTENT_TYPE, JSON_CONTENT_TYPE

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

    def __init__(self, *args, root: Path, **kwargs) -> None:
        self.root = root
        super().__init__(*args, **kwargs)

    def do_HEAD(self) -> None:  # noqa: N802 (the http.server name)
        self._respond(body=False)

    def do_GET(self) -> None:  # noqa: N802
        self._respond(body=True)

    def _respond(self, body: bool) -> None:
        url_path = unquote(urlsplit(self.path).path)
        parts = [part for part in posixpath.normpath(url_path).split("/") if part]
        if any(part in ("..", ".") or part.startswith(".") for part in parts):
            self.send_error(HTTPStatus.NOT_FOUND)
            return
        target = self.root.joinpath(*parts)
        try:
            target.resolve().relative_to(self.root)
        except ValueError:
            self.send_error(HTTPStatus.NOT_FOUND)
            return
        if target.is_dir():
            if not url_path.endswith("/"):
                self.send_response(HTTPStatus.MOVED_PERMANENTLY)
                self.send_header("Location", url_path + "/")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            page, content_type = negotiate(self.headers.get("Accept"))
            if not (target / page).is_file():
                page, content_type = "index.html", "text/html; charset=utf-8"
            target = target / page
            self._send_file(target, content_type, body, vary=True)
            return
        if not target.is_file():
            self.send_error(HTTPStatus.NOT_FOUND)
            return
        self._send_file(target, _content_type(target), body, vary=False)

    def _send_file(self, path: Path, content_type: str, body: bool, vary: bool) -> None:
        if not path.is_file():
            self.send_error(HTTPStatus.NOT_FOUND)
            return
        data = path.read_bytes()
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        if vary:
            self.send_header("Vary", "Accept")
            self.send_header("Cache-Control", "max-age=60")
        else:
            self.send_header("Cache-Control", "max-age=31536000, immutable"
                             if path.parent.name == "files" else "max-age=60")
        self.end_headers()
        if body:
            self.wfile.write(data)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 (the http.server name)
        sys.stderr.write(f"{self.address_string()} - {format % args}\n")
        sys.stderr.flush()


def _content_type(path: Path) -> str:
    if path.suffix == ".whl":
        return "application/zip"
    if path.name.endswith(".metadata"):
        return "text/plain; charset=utf-8"
    if path.suffix == ".json":
        return "application/json"
    guessed, _ = mimetypes.guess_type(path.name)
    return guessed or "application/octet-stream"


def make_server(root: Path, host: str, port: int) -> ThreadingHTTPServer:
    handler = partial(IndexHandler, root=root.resolve())
    return ThreadingHTTPServer((host, port), handler)
