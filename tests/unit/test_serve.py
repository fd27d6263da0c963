"""`factory serve` under load a user's machine can meet: files streamed, never held whole in
memory, and connections that send nothing closed after the idle time-out."""

from __future__ import annotations

import socket
import threading
import time
import tracemalloc
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from factory.index.serve import make_server

BIG = 64 << 20  # a wheel of 64 MiB


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    files = tmp_path / "index" / "files"
    files.mkdir(parents=True)
    with open(files / "big-1.0-py3-none-any.whl", "wb") as handle:
        handle.truncate(BIG)  # sparse: costs no disk
    server = make_server(tmp_path / "index", "127.0.0.1", 0, idle_timeout=0.3)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", files
    finally:
        server.shutdown()
        server.server_close()


def test_a_big_wheel_is_streamed(served: tuple[str, Path]) -> None:
    url, _ = served
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        received = 0
        with urllib.request.urlopen(f"{url}/files/big-1.0-py3-none-any.whl") as response:
            assert int(response.headers["Content-Length"]) == BIG
            assert response.headers["Content-Type"] == "application/zip"
            while block := response.read(1 << 16):
                received += len(block)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert received == BIG
    assert peak < 8 << 20, f"serving a {BIG >> 20} MiB file took {peak >> 20} MiB of memory"


def test_an_idle_connection_is_closed(served: tuple[str, Path]) -> None:
    url, _ = served
    port = int(url.rsplit(":", 1)[1])
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as idle:
        assert idle.recv(1) == b""  # the server hung up on a client that said nothing
    assert time.monotonic() - started < 5
    # and goes on serving others
    with urllib.request.urlopen(f"{url}/files/big-1.0-py3-none-any.whl") as response:
        assert response.status == 200


LOG = "img2gray-cu130torch211-x86_64.log"


@pytest.mark.parametrize("path", ["/logs/", f"/logs/{LOG}", f"/logs/../logs/{LOG}",
                                  f"//logs/{LOG}", f"/%6Cogs/{LOG}", "/.factory/manifest.json"])
def test_the_build_logs_and_records_are_never_served(served: tuple[str, Path], path: Any) -> None:
    """A log holds whatever a build printed: it stays home, as the factory's records do."""
    url, files = served
    logs = files.parent / "logs"
    logs.mkdir()
    (logs / LOG).write_text("a build's output\n")
    (files.parent / ".factory").mkdir()
    (files.parent / ".factory" / "manifest.json").write_text("{}")
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(f"{url}{path}")
    assert caught.value.code == 404


def start(root: Path, **settings: Any) -> tuple[int, Callable[[], None]]:
    server = make_server(root, "127.0.0.1", 0, **settings)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()

    def stop() -> None:
        server.shutdown()
        server.server_close()
    return server.server_address[1], stop


def test_a_client_trickling_its_headers_is_cut_off(tmp_path: Path) -> None:
    """One byte every 0.2 s keeps a per-read timeout happy forever; the headers' own deadline
    does not."""
    (tmp_path / "files").mkdir()
    port, stop = start(tmp_path, idle_timeout=5, header_timeout=1)
    try:
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as slow:
            try:
                for byte in b"GET /files/ HTTP/1.1\r\nX-Slow: " + b"a" * 100:
                    slow.sendall(bytes([byte]))
                    time.sleep(0.2)
            except OSError:
                pass  # hung up on
            assert slow.recv(1024) == b""
        assert time.monotonic() - started < 5
    finally:
        stop()


def test_one_connection_more_than_the_workers_is_answered_503_at_once(tmp_path: Path) -> None:
    (tmp_path / "files").mkdir()
    port, stop = start(tmp_path, idle_timeout=5, header_timeout=5, workers=2)
    try:
        held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(2)]
        time.sleep(0.3)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as third:
            third.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert third.recv(1024).startswith(b"HTTP/1.1 503 Service Unavailable")
        for connection in held:
            connection.close()
        time.sleep(0.3)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as after:
            after.sendall(b"GET /files/ HTTP/1.1\r\nHost: x\r\n\r\n")
            assert after.recv(1024).startswith(b"HTTP/1.0 404")  # served again (no page)
    finally:
        stop()


def connect(port: int, source: str) -> socket.socket:
    """A connection to the server from the loopback address `source` (any 127.x.y.z is this
    machine's): a client of its own, as the server counts them."""
    client = socket.socket()
    client.settimeout(10)
    client.bind((source, 0))
    client.connect(("127.0.0.1", port))
    return client


def answer_beside(root: Path, held: int, settings: dict[str, Any], asker: str) -> bytes:
    """The start of the answer `asker` gets while 127.0.0.1 holds `held` idle connections."""
    (root / "files").mkdir(parents=True)
    port, stop = start(root, idle_timeout=5, header_timeout=5, **settings)
    try:
        holding = [connect(port, "127.0.0.1") for _ in range(held)]
        time.sleep(0.3)
        with connect(port, asker) as client:
            client.sendall(b"GET /files/ HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = client.recv(1024)
        for connection in holding:
            connection.close()
        return answer
    finally:
        stop()


def test_one_client_holds_at_most_its_share_and_others_are_served(tmp_path: Path) -> None:
    settings = {"per_client": 3}
    assert answer_beside(tmp_path / "a", 3, settings, "127.0.0.1").startswith(
        b"HTTP/1.1 503 Service Unavailable")
    assert answer_beside(tmp_path / "b", 3, settings, "127.0.0.2").startswith(b"HTTP/1.0 404")


def test_without_a_per_client_limit_one_address_may_hold_every_worker(tmp_path: Path) -> None:
    """Behind a reverse proxy (--per-client 0) every connection is the proxy's."""
    assert answer_beside(tmp_path, 39, {"workers": 40, "per_client": None},
                         "127.0.0.1").startswith(b"HTTP/1.0 404")


def test_hundreds_of_slow_connections_leave_other_clients_answered(tmp_path: Path) -> None:
    """256 connections trickling their headers, one client each and as many from one address
    as it may hold: every request of another client is answered, each within a second."""
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "a.whl").write_bytes(b"wheel")
    port, stop = start(tmp_path, idle_timeout=30, header_timeout=30)
    slow: list[socket.socket] = []
    try:
        for number in range(224):
            slow.append(connect(port, f"127.0.{1 + number // 200}.{1 + number % 200}"))
        for _ in range(32):
            slow.append(connect(port, "127.0.0.1"))
        for connection in slow:
            connection.sendall(b"GET /files/a.whl HTTP/1.1\r\nX-Slow: ")
        time.sleep(0.5)
        for _ in range(50):
            started = time.monotonic()
            with connect(port, "127.0.0.2") as client:
                client.sendall(b"GET /files/a.whl HTTP/1.0\r\n\r\n")
                answer = b""
                while chunk := client.recv(4096):
                    answer += chunk
            assert answer.startswith(b"HTTP/1.0 200") and answer.endswith(b"wheel")
            assert time.monotonic() - started < 1
    finally:
        for connection in slow:
            connection.close()
        stop()


def test_a_crafted_request_line_gets_a_404_and_one_escaped_line_in_the_log(tmp_path: Path,
        capfd: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "files").mkdir()
    port, stop = start(tmp_path, idle_timeout=5, header_timeout=5)
    try:
        for path in ["/" + "/".join(["a" * 20] * 3000), "/files/\x1b[31mred?token=s3cret"]:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
                client.sendall(f"GET {path} HTTP/1.0\r\n\r\n".encode())
                assert client.recv(1024).split(b"\r\n")[0] in (
                    b"HTTP/1.0 404 Not Found", b"HTTP/1.0 414 Request-URI Too Long")
    finally:
        stop()
    err = capfd.readouterr().err
    assert "Traceback" not in err and "\x1b" not in err and "s3cret" not in err
    assert "\\x1b[31mred" in err


def test_no_link_is_served_and_none_leads_outside(served: tuple[str, Path],
                                                  tmp_path: Path) -> None:
    """The factory writes no links: a wheel or page that is one is a 404 wherever it leads,
    and a folder that is one is followed only where it stays inside the served folder."""
    url, files = served
    root = files.parent
    secret = tmp_path / "secret.txt"
    secret.write_text("not to be served")
    (files / "real-1.0-py3-none-any.whl").write_bytes(b"wheel")
    (files / "outside-1.0-py3-none-any.whl").symlink_to(secret)
    (files / "inside-1.0-py3-none-any.whl").symlink_to(files / "real-1.0-py3-none-any.whl")
    page = root / "simple" / "demo"
    page.mkdir(parents=True)
    (page / "index.html").symlink_to(secret)
    (root / "elsewhere").symlink_to(tmp_path, target_is_directory=True)
    (root / "mirror").symlink_to(files, target_is_directory=True)
    with urllib.request.urlopen(f"{url}/files/real-1.0-py3-none-any.whl") as response:
        assert response.read() == b"wheel"
    with urllib.request.urlopen(f"{url}/mirror/real-1.0-py3-none-any.whl") as response:
        assert response.read() == b"wheel"  # a folder link that stays inside
    for path in ("/files/outside-1.0-py3-none-any.whl", "/files/inside-1.0-py3-none-any.whl",
                 "/simple/demo/", "/elsewhere/secret.txt"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url + path)
        assert refused.value.code == 404, path


def test_a_busy_server_does_not_start_a_thread_per_connection(
        served: tuple[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    url, files = served
    (files / "small-1.0-py3-none-any.whl").write_bytes(b"x" * 100)
    started: list[str] = []
    start = threading.Thread.start

    def counted(thread: threading.Thread) -> None:
        started.append(thread.name)
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", counted)
    for _ in range(60):  # one connection each, one after the other
        with urllib.request.urlopen(f"{url}/files/small-1.0-py3-none-any.whl") as response:
            assert response.read() == b"x" * 100
    assert len(started) <= 5, started  # a few: the next client may come before a thread is free
