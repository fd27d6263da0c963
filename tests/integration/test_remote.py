"""Simple indexes as other servers write them, read through pypi-simple by the two steps that
read them: `factory publish` (a registry's index) and `factory index --merge` (a published
index). The pages here are hand-written, as registries and static hosts write theirs: HTML
only, a <base href>, links without hashes, a yank with its reason."""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from factory import defaults
from factory.index.update import update_index

from ..conftest import factory_main, run_factory
from ..unit.test_index import make_wheel

ENDLESS = b"<endless>"  # a body the server sends on and on, without a length


@pytest.fixture
def site() -> Iterator[tuple[dict[str, tuple[str, bytes]], str, list[str]]]:
    """A web server answering from a dict of path -> (content type, body); its base URL and the
    paths asked for."""
    pages: dict[str, tuple[str, bytes]] = {}
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            asked.append(self.path)
            kind, body = pages.get(self.path, ("text/plain", b""))
            if body == ENDLESS:
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.end_headers()
                with contextlib.suppress(OSError):
                    while True:
                        self.wfile.write(b"<a>x</a>" * 131072)  # 1 MiB
                return
            self.send_response(200 if self.path in pages else 404)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield pages, f"http://127.0.0.1:{server.server_port}/", asked
    finally:
        server.shutdown()
        server.server_close()


def html(*rows: str, head: str = "") -> tuple[str, bytes]:
    return "text/html", (f"<!DOCTYPE html><html><head>{head}</head><body>\n"
                         + "\n".join(rows) + "\n</body></html>\n").encode()


def test_a_registry_page_with_a_base_href_is_read_as_pip_reads_it(site, tmp_path):
    """The page lists the wheel without a hash, under a <base href>: its bytes are fetched from
    where the base points, found equal, and nothing is uploaded."""
    pages, url, asked = site
    wheel = make_wheel(tmp_path / "out" / "files", "img2gray", "1.0.0+cu130torch211")
    update_index(tmp_path / "out")
    pages["/simple/img2gray/"] = html(f'<a href="{wheel.name}">{wheel.name}</a>',
                                      head='<base href="/packages/img2gray/">')
    pages[f"/packages/img2gray/{wheel.name}"] = ("application/zip", wheel.read_bytes())
    result = run_factory("publish", tmp_path / "out", "--repository-url", url + "upload/",
                         "--index-url", url + "simple/", "--dry-run",
                         env={"HOME": str(tmp_path / "home")})
    assert result.exit == 0, result.stdout + result.stderr
    assert f"already there, same sha256: {wheel.name}" in result.stdout
    assert f"/packages/img2gray/{wheel.name}" in asked


def test_merge_takes_in_an_html_only_index_with_unhashed_and_yanked_files(site, tmp_path):
    pages, url, _ = site
    first = make_wheel(tmp_path / "there", "img2gray", "1.0.0+cu130torch211")
    second = make_wheel(tmp_path / "there", "img2gray", "1.0.0+cu130torch212")
    digest = hashlib.sha256(first.read_bytes()).hexdigest()
    pages["/site/simple/"] = html('<a href="img2gray/">img2gray</a>')
    pages["/site/simple/img2gray/"] = html(
        f'<a href="../../files/{first.name}#sha256={digest}" data-yanked="broken build">'
        f'{first.name}</a>',
        f'<a href="../../files/{second.name}">{second.name}</a>')  # listed without a hash
    for wheel in (first, second):
        pages[f"/site/files/{wheel.name}"] = ("application/zip", wheel.read_bytes())
    result = run_factory("index", "--merge", url + "site/", "--out", tmp_path / "merged")
    assert result.exit == 0, result.stdout + result.stderr
    merged = tmp_path / "merged" / "files"
    for wheel in (first, second):
        assert (merged / wheel.name).read_bytes() == wheel.read_bytes()
    page = json.loads((tmp_path / "merged" / "simple" / "img2gray" / "index.json").read_text())
    assert {f["filename"]: f["yanked"] for f in page["files"]} == {
        first.name: "broken build", second.name: False}


def test_merge_refuses_an_unhashed_file_that_conflicts(site, tmp_path):
    """A file listed without a hash is downloaded and hashed before anything is written."""
    pages, url, _ = site
    wheel = make_wheel(tmp_path / "there", "img2gray", "1.0.0+cu130torch211")
    pages["/simple/"] = html('<a href="img2gray/">img2gray</a>')
    pages["/simple/img2gray/"] = html(f'<a href="../../files/{wheel.name}">{wheel.name}</a>')
    pages[f"/files/{wheel.name}"] = ("application/zip", wheel.read_bytes())
    job = tmp_path / "job"
    other = make_wheel(job / "files", "img2gray", "1.0.0+cu130torch211", payload="OTHER = 1\n")
    assert other.name == wheel.name and other.read_bytes() != wheel.read_bytes()
    update_index(job)  # the job's own index records it, as a build's does
    result = run_factory("index", "--merge", url, job, "--out", tmp_path / "merged")
    assert result.exit == 1 and "published files are immutable" in result.stderr
    assert not (tmp_path / "merged").exists()


def test_a_server_that_sends_on_and_on_is_refused_not_read(site, tmp_path, monkeypatch, capsys):
    """A published index is another server's data: a page past 64 MiB or a wheel past its
    limit is refused in one line, and nothing is written."""
    pages, url, _ = site
    pages["/endless/simple/"] = ("text/html", ENDLESS)
    result = run_factory("index", "--merge", url + "endless/", "--out", tmp_path / "merged")
    assert result.exit == 1, result.stdout + result.stderr
    assert result.stderr.strip() == (f"error: {url}endless/simple/ sends more than 64.0 MiB: no "
                                     "page of an index is that big")
    wheel = make_wheel(tmp_path / "there", "img2gray", "1.0.0+cu130torch211")
    pages["/big/simple/"] = html('<a href="img2gray/">img2gray</a>')
    pages["/big/simple/img2gray/"] = html(f'<a href="../../files/{wheel.name}">{wheel.name}</a>')
    pages[f"/big/files/{wheel.name}"] = ("application/zip", ENDLESS)
    monkeypatch.setattr(defaults, "DOWNLOAD_LIMIT", 8 * 2**20)
    result = factory_main("index", "--merge", url + "big/", "--out", tmp_path / "merged",
                          capsys=capsys)
    assert result.exit == 1, result.stdout + result.stderr
    assert result.stderr.strip() == (f"error: {url}big/files/{wheel.name} sends more than 8.0 "
                                     "MiB: no wheel is that big; the merge stops before writing "
                                     "anything")
    assert not (tmp_path / "merged").exists()
