"""`factory serve` under slow connections: hundreds of clients that open a connection and
trickle their request's headers a byte at a time, while another client asks for a wheel over
and over. Prints, for the server as it is and as it was configured before (64 workers, no
per-client limit, a 60 s header deadline), how many of the other client's requests were
answered and how long they took.

    .venv/bin/python benchmarks/serve_slow.py [--slow 256] [--requests 200] [--seconds 20]

Two shapes of attack: every slow connection from one address, and each from an address of its
own (127.0.x.y: any loopback address reaches this machine, and the server counts each as a
client). The other client's address is 127.0.0.2.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import tempfile
import threading
import time
from pathlib import Path

from factory.index.serve import make_server

WHEEL = b"w" * 65536


def connect(port: int, source: str) -> socket.socket:
    client = socket.socket()
    client.settimeout(10)
    client.bind((source, 0))
    client.connect(("127.0.0.1", port))
    return client


def trickle(port: int, sources: list[str], stop: threading.Event) -> None:
    """Keep a slow connection open from each source: a header byte every second, opened again
    when the server hangs up (as a real attacker would)."""
    open_: dict[int, socket.socket] = {}
    while not stop.is_set():
        for number, source in enumerate(sources):
            held = open_.get(number)
            try:
                if held is None:
                    held = open_[number] = connect(port, source)
                    held.sendall(b"GET /files/a.whl HTTP/1.1\r\nX-Slow: ")
                held.sendall(b"a")
            except OSError:
                if held is not None:
                    held.close()
                open_.pop(number, None)
        stop.wait(1.0)
    for held in open_.values():
        held.close()


def one_request(port: int) -> float | None:
    started = time.monotonic()
    try:
        with connect(port, "127.0.0.2") as client:
            client.sendall(b"GET /files/a.whl HTTP/1.0\r\n\r\n")
            answer = b""
            while chunk := client.recv(65536):
                answer += chunk
    except OSError:
        return None
    return time.monotonic() - started if answer.startswith(b"HTTP/1.0 200") and \
        answer.endswith(WHEEL) else None


def measure(root: Path, settings: dict[str, object], sources: list[str], requests: int,
            seconds: float) -> list[float]:
    server = make_server(root, "127.0.0.1", 0, **settings)  # type: ignore[arg-type]
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    port = server.server_address[1]
    stop = threading.Event()
    attacker = threading.Thread(target=trickle, args=(port, sources, stop), daemon=True)
    attacker.start()
    time.sleep(2.0)  # the slow connections are in
    answered: list[float] = []
    pause = seconds / requests
    for _ in range(requests):
        took = one_request(port)
        if took is not None:
            answered.append(took)
        time.sleep(pause)
    stop.set()
    attacker.join()
    server.shutdown()
    server.server_close()
    return answered


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--slow", type=int, default=256)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        (root / "files").mkdir()
        (root / "files" / "a.whl").write_bytes(WHEEL)
        shapes = {"one address": ["127.0.0.1"] * args.slow,
                  "an address each": [f"127.0.{1 + n // 250}.{1 + n % 250}"
                                      for n in range(args.slow)]}
        servers: dict[str, dict[str, object]] = {"now": {}, "before": {
                                         "workers": 64, "per_client": None,
                                         "header_timeout": 60}}
        print(f"{args.slow} slow connections; another client asks {args.requests} times in "
              f"{args.seconds:.0f} s")
        for shape, sources in shapes.items():
            for name, settings in servers.items():
                answered = measure(root, settings, sources, args.requests,
                                           args.seconds)
                share = 100 * len(answered) / args.requests
                timing = (f"median {1000 * statistics.median(answered):.1f} ms, slowest "
                          f"{1000 * max(answered):.1f} ms" if answered else "none answered")
                print(f"  {shape:>16}, server {name:>6}: {len(answered)}/{args.requests} "
                      f"answered ({share:.0f}%), {timing}")


if __name__ == "__main__":
    main()
