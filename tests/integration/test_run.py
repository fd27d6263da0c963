"""A run of cells: a bug in one cell fails that cell alone, with its traceback in the cell's
log, and the others still build and publish. A pure-Python kernel builds here without a
compiler; the compiled kernel's runner has a bug."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, cast

import pytest
from rich.console import Console

from factory.cells.job import Built, Compiling
from factory.cells.options import BuildOptions
from factory.cells.run import RunSettings, run_build
from factory.cells.runners import Runner, Runners, places_for, runners_for
from factory.cells.runners.local import LocalRunner
from factory.defaults import BUILDER_BASE, host_platform
from factory.plan.model import Cell
from factory.plan.placement import Places, place
from factory.prove.load import LoadReport
from factory.system.engine import Engine
from factory.system.process import Log
from factory.ui.progress import PlainReporter

from ..support.checks import present
from ..support.factory import FIXTURES, make_kernel
from ..support.plans import KERNEL, demo_plan, plan_for


class BrokenForCompiledCells:
    """The local runner, with a bug that strikes only compiled cells."""

    name = "local"

    def __init__(self, runner: LocalRunner) -> None:
        self.runner = runner
        self.options = runner.options

    def __enter__(self) -> BrokenForCompiledCells:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        pass

    def facts(self, cell: Cell) -> dict[str, Any]:
        return self.runner.facts(cell)

    def build(self, cell: Cell, staging: Path, log: Log, compiling: Compiling,
              progress: Callable[[str], None]) -> Built:
        if cell.cuda is not None:
            return cast(Built, {}["not a key"])  # type: ignore[index]  # a bug: a KeyError
        return self.runner.build(cell, staging, log, compiling, progress)

    def load(self, cell: Cell, wheel: Path, modules: list[str], log: Log) -> LoadReport:
        """The pure-Python wheel's import gate in its CUDA cell, as the runner does it."""
        return self.runner.load(cell, wheel, modules, log)


def test_a_bug_fails_one_cell_and_logs_its_traceback(tmp_path: Path,
                                                     factory_cache: Path) -> None:
    make_kernel(tmp_path / "demo", KERNEL.format(name="demo", backends='["cuda"]',
                                                 torch_bounds="", caps="", cuda_bounds=""),
                {"b.cpp": "", "k.cu": ""}, package="demo")
    plan = place(plan_for(tmp_path, f"""
        kernels:
          - {{path: demo, version: 1.0.0}}
          - {{path: {FIXTURES / "noarch-kernel"}, version: 2.0.0}}
        torch: ["2.11"]
        cuda: {{"13.0": {{sms: ["9.0"]}}}}
    """), Places("local"))
    options = BuildOptions(tmp_path / "build", 1767225600)
    runner = BrokenForCompiledCells(LocalRunner(factory_cache, options))
    runners = Runners({"host": cast(Runner, runner)})
    console = Console(file=io.StringIO(), width=200)
    with runners:
        results = run_build(plan, tmp_path / "out", runners, PlainReporter(console),
                            RunSettings(key=bytes(32), cells=2))
    outcome = {result.cell_id: result for result in results}
    broken = outcome[f"demo/cu130torch211/{host_platform()}"]
    assert (broken.status, broken.detail) == ("failed", "internal error: KeyError('not a key')")
    log = present(broken.log).read_text()
    assert "Traceback (most recent call last)" in log and "KeyError: 'not a key'" in log
    assert "FAILED: internal error: KeyError('not a key')" in log
    built = outcome["noarch-kernel/noarch"]
    assert built.status == "built" and built.published is not None
    assert built.published.filename == "noarch_kernel-2.0.0-py3-none-any.whl"
    assert (tmp_path / "out" / "files" / built.published.filename).is_file()


def test_auto_says_what_building_on_this_machine_means_when_docker_is_not_there(tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")
    plan = demo_plan(tmp_path)
    with Engine() as engine:
        placed = place(plan, places_for(engine, plan, "auto", BUILDER_BASE, offline=False))
    why = placed.why
    assert [cell.placement for cell in placed.cells] == ["host"]
    runners = runners_for(placed, tmp_path / "cache", BuildOptions(tmp_path / "build", 0),
                          BUILDER_BASE, None)
    assert isinstance(runners.of(placed.cells[0]), LocalRunner)
    assert why.startswith("runner: local (no docker daemon answers (")
    assert why.endswith("; so everything runs on this machine, outside containers: a setup.py "
                        "project's build, the import gate and kernels' own tests under "
                        "bubblewrap)")
