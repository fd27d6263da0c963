"""The local runner: cells build on this machine, with toolkits and torch environments from the
factory's cache."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from ...errors import BuildError
from ...plan.model import Cell
from ...prove.load import LoadReport, load_wheel
from ...prove.tests import TestReport, run_tests
from ...system.cache import exclusive
from ...system.machine import Machine
from ...system.process import Log, first_output_line
from ...toolchain import host_compiler
from ...toolchain.cuda import locate_cuda
from ...toolchain.emulated import cross_compiler
from ...values.versions import Version
from ..builders import build_cell
from ..job import Built, Compiling, cell_torch
from ..kinds import kind_of
from ..options import BuildOptions
from ..sandbox import KERNEL_CODE, Confined, gpu_devices, provide_bwrap

__all__ = ["LocalRunner"]


class LocalRunner:
    name = "local"

    def __init__(self, cache: Path, options: BuildOptions) -> None:
        self.cache = cache
        self.options = options
        self._facts: dict[tuple[Version, Path | None, bool] | str | None, dict[str, Any]] = {}

    def __enter__(self) -> LocalRunner:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        """Nothing to stop: a local build starts no container, and each compiler it runs is a
        child process that a cell's own thread waits for."""

    def facts(self, cell: Cell) -> dict[str, Any]:
        """The host facts a build depends on: the Python the environments are made with, the
        toolkit and host compiler the cell would use, and the variables the toolchain reads."""
        key = (cell.cuda.version, cell.cuda.home, cell.cross) if cell.cuda else \
            "cpu" if cell.compiled else None
        if key not in self._facts:
            variables = ("SOURCE_DATE_EPOCH", "CUDA_HOME", "CUDA_PATH",
                         f"CXX_{cell.platform}" if cell.cross else "CXX")
            facts: dict[str, Any] = {
                "python": f"{sys.version_info[0]}.{sys.version_info[1]}",
                "env": {name: os.environ.get(name) for name in variables},
            }
            if cell.cuda is not None:
                facts |= _toolchain_facts(cell.cuda.version, cell.cuda.home,
                                          cell.platform if cell.cross else None,
                                          self.options.machine)
            elif cell.compiled:  # a CPU cell: the host compiler alone
                facts["cxx"] = _compiler_fact(host_compiler(None,
                                                            self.options.machine.cxx).command)
            self._facts[key] = facts
        return self._facts[key]

    def build(self, cell: Cell, staging: Path, log: Log, compiling: Compiling,
              progress: Callable[[str], None]) -> Built:
        return build_cell(cell, self.cache, self.options, staging, log, compiling, progress)

    def load(self, cell: Cell, wheel: Path, modules: list[str], log: Log) -> LoadReport:
        env = cell_torch(cell, self.cache, self.options, log, prepared=False)
        folder = self.options.build_root / cell.key / "load"
        with exclusive(folder.parent):
            python = kind_of(cell.spec).gate_python(
                cell, env, self.cache, log, folder.parent / "load-env", self.options.offline,
                self.options.wheelhouses, wheel)
            return load_wheel(wheel, modules, str(python), folder, log,
                              self._confined(cell, folder.parent if cell.cross else folder, log))

    def test(self, cell: Cell, wheel: Path, log: Log) -> TestReport:
        env = cell_torch(cell, self.cache, self.options, log, prepared=False)
        folder = self.options.build_root / cell.key / "test"
        with exclusive(folder.parent):
            return run_tests(wheel, cell.spec.root / "tests", cell.spec.python_name, env, folder,
                             self.cache, log, self.options.offline, cell.tests,
                             cell.spec.test_requires, self.options.wheelhouses,
                             self._confined(cell, folder, log))

    def _confined(self, cell: Cell, work: Path, log: Log) -> Confined | None:
        """How a cell's gates run the kernel's code on this machine (the wheel's import, its
        tests, by the cell's CPython or an emulated one): confined by bubblewrap, as a host
        build is, writing only under `work`, with the GPU's device files for a native cell;
        with this user's rights under --unconfined alone."""
        who = "the emulated CPython runs the kernel's code" if cell.cross else \
            "the kernel's code runs"
        if self.options.unconfined:
            log.write(f"unconfined (--unconfined): {who} with this user's rights, files and "
                      f"network")
            return None
        provide_bwrap(self.cache, log, self.options.machine)
        devices = () if cell.cross else gpu_devices()
        log.write(f"   {who} confined by bubblewrap: read-only but {work}, no network, "
                  f"no other process in sight"
                  + (f", the GPU's {len(devices)} device file(s) bound in" if devices else ""))
        return Confined(work=work, what=KERNEL_CODE, devices=devices)


def _toolchain_facts(cuda: Version, home: Path | None, cross: str | None,
                     machine: Machine) -> dict[str, Any]:
    """Which toolkit and host compiler a cell of this CUDA version gets here (`cross`: the
    cross compiler for that platform); a problem with them (the build reports it) is a fact
    too."""
    try:
        toolkit = locate_cuda(cuda, home, machine.cuda_homes)
        nvcc = [str(toolkit.home), str(toolkit.version)] if toolkit else ["pypi", str(cuda)]
        compiler = cross_compiler(cross, machine).command if cross else \
            host_compiler(toolkit.version if toolkit else cuda, machine.cxx).command
    except BuildError as exc:
        return {"toolchain": str(exc)}
    return {"nvcc": nvcc, "cxx": _compiler_fact(compiler)}


def _compiler_fact(compiler: str) -> list[str]:
    return [compiler, first_output_line([compiler, "-dumpfullversion"])]
