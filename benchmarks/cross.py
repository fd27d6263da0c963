"""A cross-compiled aarch64 build next to a native build of the same cell on this x86_64
machine: the shipped example (img2gray, torch 2.11 x CUDA 13.0 x sm_90), built with
`--runner local` for x86_64 and, with `cross: true`, for aarch64, each into a fresh output
folder with an empty object cache so every unit is compiled, then its kernel tests run
(`factory test`: natively, and under qemu for aarch64).

    .venv/bin/python benchmarks/cross.py [--repeat N]

Toolkits and torch environments come from the factory's cache; the first run makes any that
are missing (the aarch64 one: Debian's arm64 CPython and PyPI's aarch64 torch) and its time is
printed apart. Needs g++-aarch64-linux-gnu and qemu-user-static.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# one cell per platform, in YAML's flow style
MATRIX = ('kernels: [{{path: "{kernel}", version: 1.0.0}}]\n'
          'torch: ["2.11"]\n'
          'cuda: {{"13.0": {{sms: ["9.0"]}}}}\n'
          "platforms: [{platform}]\ncross: true\nrunner: local\n")


def timed(argv: list[str | Path], folder: Path, what: str) -> float:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "factory", *argv], cwd=folder,
                          capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{what} failed:\n{done.stdout}{done.stderr}")
    return seconds


def build_and_test(folder: Path) -> tuple[float, float]:
    """One build into a new output folder with a new object cache, then its tests: seconds."""
    out = Path(tempfile.mkdtemp(dir=folder))
    objects = Path(tempfile.mkdtemp(dir=folder))
    build = timed(["build", "matrix.yaml", "--out", out, "--object-cache", objects], folder,
                  f"the build in {folder}")
    test = timed(["test", "matrix.yaml", "--out", out], folder, f"the tests in {folder}")
    return build, test


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        results = {}
        for platform in ("x86_64", "aarch64"):
            folder = Path(scratch) / platform
            folder.mkdir()
            (folder / "matrix.yaml").write_text(
                MATRIX.format(kernel=REPO / "examples" / "img2gray", platform=platform))
            first = build_and_test(folder)
            print(f"{platform}: first build (makes what the cache lacks) {first[0]:.1f} s, "
                  f"tests {first[1]:.1f} s", flush=True)
            results[platform] = [build_and_test(folder) for _ in range(args.repeat)]
        for platform, runs in results.items():
            how = "cross-compiled, tests under qemu" if platform == "aarch64" else "native"
            print(f"{platform} ({how}): build {statistics.median(r[0] for r in runs):.1f} s, "
                  f"tests {statistics.median(r[1] for r in runs):.1f} s "
                  f"(medians of {len(runs)})")


if __name__ == "__main__":
    main()
