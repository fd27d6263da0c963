"""The local runner: cells build on this machine, with toolkits and torch environments from the
factory's cache."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from ...plan.cells import Cell
from ...process import Log, first_output_line
from ...toolchain import host_compiler
from ..cell import build_cell
from ..options import BuildOptions

__all__ = ["LocalRunner"]


class LocalRunner:
    name = "local"

    def __init__(self, cache: Path, options: BuildOptions) -> None:
        self.cache = cache
        self.options = options
        self._facts: dict[str, Any] | None = None

    def __enter__(self) -> LocalRunner:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        """Nothing to stop: a local build starts no container, and each compiler it runs is a
        child process that a cell's own thread waits for."""

    def facts(self, cell: Cell) -> dict[str, Any]:
        """The host facts a build depends on: the Python the environments are made with, the
        host compiler, and the variables the toolchain reads."""
        if self._facts is None:
            compiler = host_compiler()
            self._facts = {
                "python": f"{sys.version_info[0]}.{sys.version_info[1]}",
                "cxx": [compiler, first_output_line([compiler, "-dumpfullversion"])],
                "env": {name: os.environ.get(name) for name in ("SOURCE_DATE_EPOCH", "CUDA_HOME")},
            }
        return self._facts

    def build(self, cell: Cell, staging: Path, log: Log, threads: int,
              progress: Callable[[str], None]) -> Path:
        return build_cell(cell, self.cache, self.options, staging, log, threads, progress)
