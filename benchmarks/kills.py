"""Killed builds and builds side by side: SIGKILL at random moments of `factory build`, each run
followed by a build that must succeed and give the same bytes as an uninterrupted one; then
pairs of builds started at once into one output folder, both of which must succeed.

    .venv/bin/python benchmarks/kills.py [--kills 50] [--pairs 30] [--torch 2.11,2.14,2.15]
        [--kernel examples/img2gray] [--work DIR]

The kernel is built for torch 2.11, 2.14 and 2.15 (each with its PyPI build's CUDA), sm_90, on
this machine (runner: local): three cells that finish at different moments, all indexed at the
end of the build. Its objects come from the factory's object cache after the first build, so a
build takes seconds and the kills fall over its whole course: planning, compiling or taking
objects, the gates, the move into files/ and the cell's record, the index update. Prints how
many kills landed before the build ended, how many left a wheel in files/ that no index
recorded yet (the case the publish journal resolves), and how many reruns failed or gave other
bytes; then the pairs' outcomes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def build(matrix: Path, out: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "factory", "build", matrix, "--out", out],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def wheels(out: Path) -> dict[str, str]:
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted((out / "files").glob("*.whl"))}


def unindexed(out: Path) -> bool:
    """A wheel in files/ that the manifest does not record."""
    manifest = out / ".factory" / "manifest.json"
    try:
        known = {row[0] for row in json.loads(manifest.read_text())["files"]}
    except (OSError, ValueError, KeyError, IndexError):
        known = set()
    return any(name not in known for name in wheels(out))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=50)
    parser.add_argument("--pairs", type=int, default=30)
    parser.add_argument("--kernel", type=Path, default=REPO / "examples" / "img2gray")
    parser.add_argument("--torch", default="2.11,2.14,2.15",
                        help="the torch releases: a cell each, finishing at other moments")
    parser.add_argument("--work", type=Path)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="kills-"))
    work.mkdir(parents=True, exist_ok=True)
    matrix = work / "matrix.yaml"
    torches = ", ".join(f'"{release}"' for release in args.torch.split(","))
    matrix.write_text(f"kernels:\n  - {{path: {args.kernel.resolve()}, version: 1.0.0}}\n"
                      f'torch: [{torches}]\ncuda: {{follow: torch, sms: ["9.0"]}}\n'
                      "runner: local\n")
    for name in ("warm", "reference"):  # the first fills the object cache, the second is timed
        reference = work / name
        start = time.perf_counter()
        done = build(matrix, reference)
        if done.wait() != 0:
            sys.exit(f"the uninterrupted build failed: {done.stderr.read().decode()[-2000:]}")
        seconds = time.perf_counter() - start
    expected = wheels(reference)
    print(f"uninterrupted build: {seconds:.1f} s, {', '.join(expected)}")

    landed = left = failed = differ = 0
    rng = random.Random(1)
    for run in range(args.kills):
        out = work / f"kill{run}"
        process = build(matrix, out)
        try:
            process.wait(timeout=rng.uniform(0.3, seconds))
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGKILL)
            process.wait()
            landed += 1
            left += unindexed(out)
        again = build(matrix, out)
        if again.wait() != 0:
            failed += 1
            print(f"  run {run}: the build after the kill failed: "
                  f"{again.stderr.read().decode().strip()[-400:]}")
        elif wheels(out) != expected:
            differ += 1
            print(f"  run {run}: other bytes than the uninterrupted build's")
        shutil.rmtree(out, ignore_errors=True)
    print(f"kills: {args.kills} runs, {landed} killed before the build ended, {left} of them "
          f"with a wheel in files/ that no index recorded; after each, the next build: "
          f"{args.kills - failed} rc 0, {failed} failed, {differ} with other bytes")

    both = 0
    for pair in range(args.pairs):
        out = work / f"pair{pair}"
        first, second = build(matrix, out), build(matrix, out)
        codes = (first.wait(), second.wait())
        if codes == (0, 0) and wheels(out) == expected and not unindexed(out):
            both += 1
        else:
            message = (first.stderr.read() + second.stderr.read()).decode().strip()
            print(f"  pair {pair}: exit {codes}: {message[-400:]}")
        shutil.rmtree(out, ignore_errors=True)
    print(f"two builds into one folder at once: {both} of {args.pairs} pairs both rc 0, "
          "every wheel indexed")
    return 0 if failed == differ == 0 and both == args.pairs else 1


if __name__ == "__main__":
    sys.exit(main())
