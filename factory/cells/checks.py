"""The gates a cell's wheel passes before it is published, judged once per build on the host
(also for wheels built in a container, which is not trusted to judge its own output). The
report they read is handed on, so the index never reads the wheel again."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from ..config.model import SizeLimit
from ..errors import BuildError
from ..plan.model import Cell
from ..system.process import Log
from ..values.units import human_size
from ..wheel.fatbin import describe_code_size
from ..wheel.gates import Expectation, check_wheel
from ..wheel.inspect import WheelReport, inspect_wheel
from .kinds import kind_of

__all__ = ["cell_expectation", "check_cell_wheel"]


def cell_expectation(cell: Cell, max_size: SizeLimit | None = None) -> Expectation:
    """What the cell's wheel must be, as its kind says: its name and labelled version, its
    torch pin, its CUDA major, the GPU code the plan promises, and at most `max_size` bytes."""
    return kind_of(cell.spec).expectation(cell, max_size)


def check_cell_wheel(cell: Cell, wheel: Path, log: Log,
                     max_size: SizeLimit | None = None) -> WheelReport:
    """Inspect a finished wheel; its report when it passes every gate, else a BuildError with
    the first reason (every reason is in the log)."""
    log.step(f"checking {wheel.name}")
    report = inspect_wheel(wheel)
    log.write(f"   {human_size(report.size)} ({human_size(report.wheel.installed_size)} "
              "installed)")
    for so in report.shared_objects:
        log.write(f"   {so.path}: SASS {' '.join(so.sass) or 'none'}, PTX "
                  f"{' '.join(so.ptx) or 'none'}; needs {' '.join(so.needed)}; symbols allow "
                  f"{so.manylinux}; {so.abi3.describe() if so.abi3 else 'not an extension'}")
        if so.gpu_sizes:
            log.write("   GPU code " + ", ".join(describe_code_size(code, size)
                                                  for code, size in so.gpu_sizes))
    if report.cubins:
        by_sm = Counter(cubin.sm for cubin in report.cubins)
        log.write("   cubins: " + ", ".join(f"{sm} {by_sm[sm]}" for sm in sorted(
            by_sm, key=lambda sm: int(sm[3:]))))
    problems = check_wheel(report, cell_expectation(cell, max_size))
    for problem in problems:
        log.write(f"   gate failed: {problem}")
    if problems:
        more = f" (and {len(problems) - 1} more, see the log)" if len(problems) > 1 else ""
        raise BuildError(f"{wheel.name} failed its checks: {problems[0]}{more}")
    log.write("   all gates passed")
    return report
