"""Real stores the tests start: moto's S3 server (boto3 finds it through the environment, as it
finds MinIO or R2) and Debian's redis-server."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from .checks import present
from .system import debian_package

BUCKET = "kernel-wheels"


@contextmanager
def s3_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, dict[str, str]]]:
    """moto's S3 server on 127.0.0.1 with the bucket kernel-wheels: its client, and the
    variables that point boto3 at it (set in this process too)."""
    boto3 = pytest.importorskip("boto3")
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{present(server._server).server_port}",
           "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": os.devnull,
           "AWS_SHARED_CREDENTIALS_FILE": os.devnull}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    try:
        client = boto3.client("s3")
        client.create_bucket(Bucket=BUCKET)
        yield client, env
    finally:
        server.stop()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def redis_server(folder: Path, password: str | None = None) -> Iterator[str]:
    """Debian's redis-server on 127.0.0.1 (nothing kept on disk): its URL."""
    server = debian_package("redis-server", "redis-server")
    port = free_port()
    folder.mkdir(parents=True, exist_ok=True)
    argv = [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
            "no", "--dir", str(folder), *(["--requirepass", password] if password else [])]
    with subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as process:
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    assert process.poll() is None and time.monotonic() < deadline, \
                        "redis-server did not start"
                    time.sleep(0.1)
            yield f"redis://{f':{password}@' if password else ''}127.0.0.1:{port}/0"
        finally:
            process.terminate()
