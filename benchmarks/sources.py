"""What fetching a kernel from a monorepo costs: `factory lock` of two kernels from one git
repository, cold (empty cache), warm, and offline, next to the clones a simpler tool would make.

    .venv/bin/python benchmarks/sources.py [URL] [--rev REV] [--kernels relu,tinygrad-rms]

URL defaults to https://github.com/huggingface/kernels-community; any git URL works (a local
mirror as file://...). Each figure is the median of --repeat runs; the cache size is the
factory's sources folder after a cold lock.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def timed(argv: list[str | Path], cwd: Path | None = None) -> float:
    started = time.perf_counter()
    done = subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(map(str, argv))} failed:\n{done.stdout}{done.stderr}")
    return time.perf_counter() - started


def size_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", nargs="?", default="https://github.com/huggingface/kernels-community")
    parser.add_argument("--rev", default="main")
    parser.add_argument("--kernels", default="relu,tinygrad-rms")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    factory: list[str | Path] = [sys.executable, "-m", "factory"]

    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        entries = "".join(f"  - git: {args.url}\n    rev: {args.rev}\n    subdir: {name}\n"
                          f"    version: 1.0.0\n" for name in args.kernels.split(","))
        matrix = root / "matrix.yaml"
        matrix.write_text(f"kernels:\n{entries}torch: [\"2.11\"]\ncuda: {{\"13.0\": {{}}}}\n")
        cache = root / "cache"
        lock: list[str | Path] = [*factory, "lock", matrix, "--cache-dir", cache]

        figures: dict[str, list[float]] = {}
        for _ in range(args.repeat):
            shutil.rmtree(cache, ignore_errors=True)
            figures.setdefault("factory lock, cold cache", []).append(timed(lock, REPO))
            figures.setdefault("factory lock, warm cache", []).append(timed(lock, REPO))
            figures.setdefault("factory lock --offline", []).append(
                timed([*lock, "--offline"], REPO))
        cached = size_mb(cache / "sources")
        for _ in range(args.repeat):
            for name, extra in (("git clone --bare (everything)", []),
                                ("git clone --depth 1 --no-checkout", ["--depth", "1",
                                                                       "--no-checkout"])):
                target = root / "clone"
                shutil.rmtree(target, ignore_errors=True)
                figures.setdefault(name, []).append(
                    timed(["git", "clone", "--quiet", *extra, *(["--bare"] if not extra else []),
                           args.url, target]))
                figures.setdefault(f"{name} MB", []).append(size_mb(target))

    print(f"{args.url} @ {args.rev}, kernels {args.kernels}, median of {args.repeat}")
    for name, values in figures.items():
        unit = "MB" if name.endswith(" MB") else "s"
        print(f"  {name.removesuffix(' MB') + (' (size)' if unit == 'MB' else ''):45s} "
              f"{statistics.median(values):8.2f} {unit}")
    print(f"  {'factory sources cache after a cold lock (size)':45s} {cached:8.2f} MB")


if __name__ == "__main__":
    main()
