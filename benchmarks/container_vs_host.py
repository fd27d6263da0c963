"""A container build next to a host build of the same cell: the shipped example (img2gray,
torch 2.11 x CUDA 13.0 x sm_90), built with `--runner local` and with `--runner docker` on the
offline bullseye base, each into a fresh output folder so the cell is really built.

    .venv/bin/python benchmarks/container_vs_host.py [--repeat N] [--base IMAGE] [--cold]

Toolkits, torch environments and the builder image come from the factory's cache and docker
(the first run of each fills them; its time is printed apart). --cold also times making the
builder image from its base with no layer cached, and again after a change to the
factory. Needs a docker engine and the base image (docker/make-debian-base.sh).
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MATRIX = """kernels:
  - path: {kernel}
    version: 1.0.0
torch: ["2.11"]
cuda:
  "13.0":
    sms: ["9.0"]
docker:
  base: {base}
"""


def build(folder: Path, runner: str) -> tuple[float, str]:
    """One `factory build` into a new output folder: seconds, and the wheel's name."""
    out = Path(tempfile.mkdtemp(dir=folder))
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "factory", "build", "matrix.yaml", "--out", out,
                           "--runner", runner], cwd=folder, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"the {runner} build failed:\n{done.stdout}{done.stderr}")
    (wheel,) = (out / "files").glob("*.whl")
    return seconds, wheel.name


def builder_image(folder: Path) -> str:
    done = subprocess.run([sys.executable, "-m", "factory", "images", "matrix.yaml"], cwd=folder,
                          capture_output=True, text=True, check=True)
    found = re.search(r"^image (\S+)", done.stdout, re.M)
    assert found is not None, done.stdout
    return found.group(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--base", default="kernel-wheel-factory/base:bullseye")
    parser.add_argument("--cold", action="store_true",
                        help="also time making the builder image from its base")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        (folder / "matrix.yaml").write_text(
            MATRIX.format(kernel=REPO / "examples" / "img2gray", base=args.base))
        if args.cold:
            # Every builder image goes, and with them the layers they share.
            listing = subprocess.run(
                ["docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}",
                 "kernel-wheel-factory/builder-*"], capture_output=True, text=True, check=True)
            for image in listing.stdout.split():
                subprocess.run(["docker", "image", "rm", image], capture_output=True, check=True)
            started = time.perf_counter()
            builder_image(folder)
            print(f"builder image from its base, no layer cached: "
                  f"{time.perf_counter() - started:.1f} s")
            source = REPO / "factory" / "__init__.py"
            source.write_text(source.read_text() + "# touched\n")
            try:
                started = time.perf_counter()
                builder_image(folder)
                print(f"builder image after a change to the factory: "
                      f"{time.perf_counter() - started:.1f} s")
            finally:
                source.write_text(source.read_text().removesuffix("# touched\n"))
        for runner in ("local", "docker"):
            first, wheel = build(folder, runner)
            print(f"{runner:6}  first run {first:5.1f} s  {wheel}")
            runs = [build(folder, runner)[0] for _ in range(args.repeat)]
            print(f"{runner:6}  " + "  ".join(f"{s:5.1f}" for s in runs)
                  + f"   median {statistics.median(runs):.1f} s")


if __name__ == "__main__":
    main()
