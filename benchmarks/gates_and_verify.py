"""What trust costs: the time to inspect and gate a wheel (what every `factory build` adds per
cell), and a `factory verify` rebuild next to the build it repeats.

    .venv/bin/python benchmarks/gates_and_verify.py [WHEEL] [--repeat N]

Without WHEEL, the shipped example is built first (`factory build matrix.yaml` into a scratch
folder; the toolkit and torch environment come from the factory's cache). Prints each run and
the medians.
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
sys.path.insert(0, str(REPO))

from factory.wheel.expect import recorded_expectation  # noqa: E402
from factory.wheel.gates import check_wheel  # noqa: E402
from factory.wheel.inspect import inspect_wheel  # noqa: E402


def timed(argv: list[str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed:\n{done.stdout}{done.stderr}")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheel", nargs="?", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    factory = [sys.executable, "-m", "factory"]

    with tempfile.TemporaryDirectory(prefix="kwf-bench-") as scratch:
        wheel = args.wheel
        builds = []
        if wheel is None:
            for number in range(args.repeat):
                out = Path(scratch) / f"out{number}"
                builds.append(timed([*factory, "build", "matrix.yaml", "--out", str(out)]))
                print(f"factory build (whole cell)      run {number + 1}: {builds[-1]:.2f} s")
            (wheel,) = (Path(scratch) / "out0" / "files").glob("*.whl")

        gates = []
        for number in range(args.repeat):
            started = time.perf_counter()
            problems = check_wheel(report := inspect_wheel(wheel), recorded_expectation(report))
            gates.append(time.perf_counter() - started)
            print(f"inspect + gates                 run {number + 1}: {gates[-1]:.2f} s "
                  f"({len(problems)} problems)")

        verifies = []
        for number in range(args.repeat):
            verifies.append(timed([*factory, "verify", str(wheel)]))
            print(f"factory verify (rebuild, compare) run {number + 1}: {verifies[-1]:.2f} s")

    print()
    print(f"{wheel.name}")
    if builds:
        print(f"median factory build:      {statistics.median(builds):.2f} s")
    print(f"median inspect + gates:    {statistics.median(gates):.2f} s")
    print(f"median factory verify:     {statistics.median(verifies):.2f} s")


if __name__ == "__main__":
    main()
