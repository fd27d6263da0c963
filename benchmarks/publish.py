"""How long `factory publish` takes: a synthetic index of N wheels of M MB each (incompressible
payload, 20 torch x CUDA labels), published with the real command in a subprocess to
- a pypiserver on 127.0.0.1 (twine uploads, one request per wheel),
- a folder,
- moto's S3 server on 127.0.0.1 (boto3, 8 uploads at a time),
each first into an empty target, then again with nothing changed (only the comparison runs).

    .venv/bin/python benchmarks/publish.py [--wheels 100] [--megabytes 1]

Everything runs on this machine, so network time is loopback time: the figures are the
factory's and the servers' own work, not a real link's.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from factory.index.update import update_index  # noqa: E402
from factory.wheel.assemble import CoreMetadata, write_wheel  # noqa: E402

LABELS = [f"cu{cuda}torch{torch}" for cuda in ("126", "128", "130", "132")
          for torch in ("29", "210", "211", "212", "213")]
PASSWORD = "benchmark-password"


def make_index(out: Path, count: int, megabytes: float, scratch: Path) -> int:
    files = out / "files"
    files.mkdir(parents=True)
    for number in range(count):
        project = f"kernel-{number % 5}"
        package = scratch / f"content-{number}" / project.replace("-", "_")
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(f"N = {number}\n")
        (package / "_kernel.bin").write_bytes(os.urandom(int(megabytes * 1024 * 1024)))
        version = f"1.0.{number // len(LABELS)}+{LABELS[number % len(LABELS)]}"
        metadata = CoreMetadata(project, version, "benchmark wheel", ">=3.9", ("torch",),
                                "MIT", None)
        write_wheel(package.parent, files, metadata, "cp39-abi3-linux_x86_64", False,
                    1767225600)
    update_index(out)
    return sum(p.stat().st_size for p in files.glob("*.whl"))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def wait_for(port: int) -> None:
    for _ in range(150):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"nothing answers on port {port}")


def publish(*args: str, env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "factory", "publish", *args],
                          capture_output=True, text=True, env={**os.environ, **env})
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"factory publish {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--wheels", type=int, default=100)
    parser.add_argument("--megabytes", type=float, default=1.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        out = scratch / "index"
        size = make_index(out, args.wheels, args.megabytes, scratch)
        print(f"{args.wheels} wheels, {size / 1e6:.0f} MB, "
              f"{sum(1 for p in out.rglob('*') if p.is_file())} files in the index folder")

        from passlib.apache import HtpasswdFile  # type: ignore[import-untyped]

        users = HtpasswdFile(str(scratch / "htpasswd"), new=True)
        users.set_password("bench", PASSWORD)
        users.save()
        (scratch / "packages").mkdir()
        port = free_port()
        registry = subprocess.Popen(
            [str(Path(sys.executable).parent / "pypi-server"), "run", "-i", "127.0.0.1", "-p",
             str(port), "-P", str(scratch / "htpasswd"), "-a", "update",
             str(scratch / "packages")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        s3 = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        s3.start()
        try:
            wait_for(port)
            url = f"http://127.0.0.1:{port}/"
            twine = {"TWINE_USERNAME": "bench", "TWINE_PASSWORD": PASSWORD,
                     "PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring"}
            assert s3._server is not None  # started above
            aws = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{s3._server.server_port}",
                   "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                   "AWS_DEFAULT_REGION": "us-east-1"}
            import boto3

            os.environ.update(aws)
            boto3.client("s3").create_bucket(Bucket="bench")
            runs = [("pypiserver (twine)", [str(out), "--repository-url", url], twine),
                    ("folder", [str(out), "--to", str(scratch / "site")], {}),
                    ("S3 (moto, boto3)", [str(out), "--to", "s3://bench/index"], aws)]
            for name, command, env in runs:
                first = publish(*command, env=env)
                again = publish(*command, env=env)
                print(f"{name:20s} first {first:6.1f} s ({size / 1e6 / first:5.1f} MB/s)   "
                      f"again, nothing to send {again:5.2f} s")
        finally:
            registry.terminate()
            s3.stop()


if __name__ == "__main__":
    main()
