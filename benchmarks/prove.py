"""What proving a wheel costs: the import gate (installing the wheel into a throw-away folder
and importing it with the cell's torch, what every `factory build` adds per compiled cell) and
`factory test` (a fresh environment beside the cell's torch, then the kernel's own tests).

    .venv/bin/python benchmarks/prove.py [--repeat N]

The shipped example is built first (`factory build matrix.yaml` into a scratch folder; the
toolkit and torch environment come from the factory's cache); the gate is timed with the torch
interpreter that build used (read from its log). Prints each run and the medians.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gates_and_verify import timed  # noqa: E402  (run as a script: benchmarks/ is on the path)

from factory.prove.load import load_wheel  # noqa: E402
from factory.system.process import Log  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    factory = [sys.executable, "-m", "factory"]
    with tempfile.TemporaryDirectory(prefix="kwf-bench-") as scratch:
        out = Path(scratch) / "out"
        build = timed([*factory, "build", "matrix.yaml", "--out", str(out)])
        print(f"factory build (whole cell, gate included): {build:.2f} s")
        (wheel,) = (out / "files").glob("*.whl")
        log = next((out / "logs").glob("*.log")).read_text()
        found = re.search(r"loading \S+ with (\S+): import", log)
        if not found:
            sys.exit("the build's log names no import gate")
        python = found[1]

        gates = []
        for number in range(args.repeat):
            with open(Path(scratch) / "gate.log", "w") as handle:
                started = time.perf_counter()
                report = load_wheel(wheel, ["img2gray"], python, Path(scratch) / "load",
                                    Log(handle))
                gates.append(time.perf_counter() - started)
            print(f"import gate (install + import)  run {number + 1}: {gates[-1]:.2f} s "
                  f"({report.describe_ops()})")

        tests = []
        for number in range(args.repeat):
            tests.append(timed([*factory, "test", "matrix.yaml", "--out", str(out)]))
            print(f"factory test (env + tests)      run {number + 1}: {tests[-1]:.2f} s")

    print(f"\nmedians: import gate {statistics.median(gates):.2f} s, factory test "
          f"{statistics.median(tests):.2f} s, against a whole-cell build of {build:.2f} s")


if __name__ == "__main__":
    main()
