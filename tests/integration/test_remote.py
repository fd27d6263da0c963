"""Simple indexes as other servers write them, read through pypi-simple by the two steps that
read them: `factory publish` (a registry's index) and `factory index --merge` (a published
index). The pages here are hand-written, as registries and static hosts write theirs: HTML
only, a <base href>, links without hashes, a yank with its reason."""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from factory import defaults
from factory.errors import SourceError
from factory.index.update import update_index
from factory.sources.names import taken_names

from ..support.factory import EXAMPLE, factory_main, run_factory
from ..support.wheels import make_wheel

EXAMPLE_MATRIX = EXAMPLE.parent.parent / "matrix.yaml"
ENDLESS = b"<endless>"  # a body the server sends on and on, without a length
DRIP = b"<drip>"  # a body the server sends a byte at a time, a byte every 0.2 s


# a served index: its files (name: (path, bytes)), its URL, the requests it was sent
Site = tuple[dict[str, tuple[str, bytes]], str, list[str]]


@pytest.fixture
def site() -> Iterator[Site]:
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
            if body == DRIP:
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", "100000")
                self.end_headers()
                with contextlib.suppress(OSError):
                    for _ in range(100000):
                        self.wfile.write(b" ")
                        self.wfile.flush()
                        time.sleep(0.2)
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


def test_a_registry_page_with_a_base_href_is_read_as_pip_reads_it(
        site: Site, tmp_path: Path) -> None:
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


def test_merge_takes_in_an_html_only_index_with_unhashed_and_yanked_files(
        site: Site, tmp_path: Path) -> None:
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


def test_merge_refuses_an_unhashed_file_that_conflicts(site: Site,
                                                       tmp_path: Path) -> None:
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


def test_a_server_that_sends_on_and_on_is_refused_not_read(
        site: Site, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
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


def test_a_server_that_drips_is_given_up_on_in_time(site: Site,
                                                    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A byte every 0.2 s never trips a read's timeout: the whole answer has a deadline, so
    `index --merge URL` and `plan --new URL` end with one line, and nothing is written."""
    pages, url, _ = site
    pages["/drip/simple/"] = ("text/html", DRIP)
    monkeypatch.setattr(defaults, "INDEX_DEADLINE", 2)
    started = time.monotonic()
    result = factory_main("index", "--merge", url + "drip/", "--out", tmp_path / "merged",
                          capsys=capsys)
    assert result.exit == 1, result.stdout + result.stderr
    assert result.stderr.strip() == f"error: {url}drip/simple/ did not arrive whole within 2 s"
    assert not (tmp_path / "merged").exists()
    result = factory_main("plan", EXAMPLE_MATRIX, "--new", url + "drip/", "--locked",
                          capsys=capsys)
    assert result.exit == 1, result.stdout + result.stderr
    assert result.stderr.strip() == f"error: {url}drip/simple/ did not arrive whole within 2 s"
    assert time.monotonic() - started < 20


def test_a_wheel_that_drips_is_given_up_on_in_time(site: Site,
                                                   tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    pages, url, _ = site
    wheel = make_wheel(tmp_path / "there", "img2gray", "1.0.0+cu130torch211")
    pages["/slow/simple/"] = html('<a href="img2gray/">img2gray</a>')
    pages["/slow/simple/img2gray/"] = html(f'<a href="../../files/{wheel.name}">{wheel.name}</a>')
    pages[f"/slow/files/{wheel.name}"] = ("application/zip", DRIP)
    monkeypatch.setattr(defaults, "DOWNLOAD_DEADLINE", 2)
    result = factory_main("index", "--merge", url + "slow/", "--out", tmp_path / "merged",
                          capsys=capsys)
    assert result.exit == 1, result.stdout + result.stderr
    assert result.stderr.strip() == (f"error: {url}slow/files/{wheel.name} did not arrive "
                                     "whole within 2 s; the merge stops before writing anything")
    assert not (tmp_path / "merged").exists()


def test_a_debian_mirror_that_drips_is_given_up_on_in_time(
        site: Site, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A mirror that sends the suite's signed index a byte at a time (as a cross cell's root,
    or the bubblewrap the factory unpacks, would ask it) is given up on at the archive's own
    deadline (ten minutes, two here), in one line."""
    import requests

    from factory.errors import BuildError
    from factory.sources.debian import _get

    pages, url, _ = site
    pages["/debian/dists/bookworm/InRelease"] = ("text/plain", DRIP)
    monkeypatch.setattr(defaults, "DEBIAN_DEADLINE", 2)
    assert defaults.DOWNLOAD_DEADLINE == 3600  # a wheel's own deadline, not the archive's
    started = time.monotonic()
    with requests.Session() as session, pytest.raises(BuildError) as caught:
        _get(session, f"{url}debian/dists/bookworm/InRelease", 2**20)
    assert str(caught.value) == f"{url}debian/dists/bookworm/InRelease did not arrive whole " \
                                "within 2 s"
    assert time.monotonic() - started < 20


@pytest.mark.parametrize("body", ["drip", "endless", "deep"])
def test_the_name_clash_lookup_is_bounded(site: Site,
                                          tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          body: str) -> None:
    """The public index's answer about a name arrives whole within the lookup's deadline, at
    most a page's size, JSON no deeper than the parser goes: else one line, not a hang, a
    MemoryError or a RecursionError."""
    pages, url, _ = site
    json_type = "application/vnd.pypi.simple.v1+json"
    pages["/simple/img2gray/"] = {"drip": ("text/html", DRIP), "endless": ("text/html", ENDLESS),
                                  "deep": (json_type, b"[" * 200_000 + b"]" * 200_000)}[body]
    monkeypatch.setattr(defaults, "NAME_CHECK_DEADLINE", 2)
    monkeypatch.setattr(defaults, "PAGE_LIMIT", 4 * 2**20)
    with pytest.raises(SourceError) as raised:
        taken_names(["img2gray"], url + "simple/", tmp_path / "cache")
    said = {"drip": f"{url}simple/img2gray/ did not arrive whole within 2 s",
            "endless": f"{url}simple/img2gray/ sends more than 4.0 MiB",
            "deep": "RecursionError"}[body]
    assert said in str(raised.value) and "\n" not in str(raised.value)
