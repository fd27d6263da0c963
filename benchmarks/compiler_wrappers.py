"""What the toolchain rules' compiler wrappers cost a setup.py build: each compiler command a
project's build runs starts the wrapper (a Python interpreter, -I -S) before the real compiler.

    .venv/bin/python benchmarks/compiler_wrappers.py [--calls 200] [--compiler g++]

Runs `COMPILER --version` CALLS times directly and through a wrapper made by the factory (the
cell of a torch 2.15 setup.py project, both rules in force, this interpreter as the build
environment's), then one real compile of a small C++ file both ways, and prints the time per
call and the wrapper's share of it. The wrapper's cost is per command, not per byte: a .cu file
that nvcc compiles for minutes pays it a few times (nvcc runs the host compiler itself).
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

from packaging.version import Version

from factory.cells.compilers import wrap_compilers
from factory.config.rules import rules_for, shipped_rules
from factory.toolchain import Toolchain
from factory.toolchain.torch import TorchEnv

SOURCE = "#include <vector>\nint f(int n) { std::vector<int> v(n); return (int)v.size(); }\n"


class _Cell:
    """The parts of a cell the wrappers read: its rules and SMs (none: no -gencode to keep)."""

    def __init__(self) -> None:
        self.rules = rules_for(shipped_rules(), Version("2.15"))
        self.sms = ()


def timed(argv: list[str], calls: int) -> float:
    """The median seconds of `calls` runs of `argv`."""
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--compiler", default="g++")
    args = parser.parse_args()
    real = shutil.which(args.compiler)
    if real is None:
        print(f"no {args.compiler} on PATH", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        env = TorchEnv(work, Path(sys.executable), work, "2.15.0", None, True, work, (), ())
        toolchain = Toolchain(None, env, real, "20")
        wrapped = wrap_compilers(_Cell(), toolchain, work, Path(sys.executable),  # type: ignore[arg-type]
                                 real)
        assert wrapped is not None
        wrapper = wrapped.variables["CXX"]
        direct = timed([real, "--version"], args.calls)
        through = timed([wrapper, "--version"], args.calls)
        print(f"{args.compiler} --version, median of {args.calls}: {direct * 1000:.1f} ms "
              f"direct, {through * 1000:.1f} ms through the wrapper "
              f"(+{(through - direct) * 1000:.1f} ms per command)")
        source = work / "small.cpp"
        source.write_text(SOURCE)
        compile_args = ["-O2", "-c", str(source), "-o", str(work / "small.o")]
        calls = max(3, args.calls // 20)
        # the same compile both ways: C++20 given directly, C++17 raised by the wrapper
        direct = timed([real, "-std=c++20", *compile_args], calls)
        through = timed([wrapper, "-std=c++17", *compile_args], calls)
        print(f"compiling a small file as C++20, median of {calls}: {direct * 1000:.0f} ms "
              f"direct, {through * 1000:.0f} ms through the wrapper (given -std=c++17): "
              f"{(through - direct) / through:.0%} of it the wrapper")
        changes = wrapped.changes()
        print(f"the wrapper noted {len(changes)} change(s), e.g. "
              f"{changes[0].before} -> {changes[0].after}" if changes else "no change noted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
