"""How fast `factory serve` answers a cell's project page, beside pypiserver and Python's own
http.server on the same folder: ab (apache2-utils) asks for the page N times from C clients at
once, R rounds each; prints the requests per second of every round.

    .venv/bin/python benchmarks/serve_speed.py [INDEX] [--requests 4000] [--clients 8]
        [--rounds 3]

INDEX is an output folder (default: index/, which README's build line makes). `factory serve`
runs with its limits on (per-client, header and idle deadlines, masking in its log); pypiserver
serves the folder's files/ and makes its own page of the project; http.server serves the
folder's index.html as a file. Every server logs its requests to a file, as each would in use.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for(url: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                answer.read()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def ab(url: str, requests: int, clients: int) -> float:
    done = subprocess.run(["ab", "-q", "-n", str(requests), "-c", str(clients), url],
                          capture_output=True, text=True, timeout=600, check=True)
    failed = re.search(r"Failed requests:\s+(\d+)", done.stdout)
    if failed is None or int(failed.group(1)):
        raise SystemExit(f"ab saw failed requests at {url}:\n{done.stdout}")
    found = re.search(r"Requests per second:\s+([\d.]+)", done.stdout)
    assert found is not None, done.stdout
    return float(found.group(1))


def servers(index: Path, project: str, label: str, port: int) -> dict[str, tuple[list[str], str]]:
    python = sys.executable
    return {
        "factory serve": ([python, "-m", "factory", "serve", str(index), "--port", str(port)],
                          f"/{label}/simple/{project}/"),
        "pypiserver": ([python, "-m", "pypiserver", "run", "-p", str(port), "-i", "127.0.0.1",
                        str(index / "files")], f"/simple/{project}/"),
        "http.server": ([python, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                         "--directory", str(index)], f"/{label}/simple/{project}/index.html"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("index", nargs="?", type=Path, default=REPO / "index")
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if shutil.which("ab") is None:
        raise SystemExit("ab is not installed (Debian: apt-get install apache2-utils)")
    manifest = json.loads((args.index / ".factory" / "manifest.json").read_text())
    project = manifest["files"][0][1]
    label = next(path.parent.parent.name for path in args.index.glob("*/simple/index.html"))
    print(f"{args.requests} requests from {args.clients} clients for {project}'s page "
          f"({label}), {args.rounds} rounds each")
    with tempfile.TemporaryDirectory() as scratch:
        port = free_port()
        for name, (argv, path) in servers(args.index, project, label, port).items():
            url = f"http://127.0.0.1:{port}{path}"
            with open(Path(scratch) / f"{name}.log", "w") as log:
                server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                          cwd=REPO)
                try:
                    wait_for(url)
                    ab(url, 200, args.clients)  # warm
                    rates = [ab(url, args.requests, args.clients) for _ in range(args.rounds)]
                finally:
                    server.terminate()
                    server.wait(10)
            print(f"{name:14} " + "  ".join(f"{rate:8.0f}" for rate in rates) + "  requests/s")


if __name__ == "__main__":
    main()
