"""Runners decide where a cell is built. The local runner builds on this machine."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from .cellbuild import build_cell
from .matrix.plan import Cell
from .process import Log
from .provenance import BuildOptions


class Runner(Protocol):
    name: str
    options: BuildOptions

    def build(self, cell: Cell, staging: Path, log: Log, threads: int,
              progress: Callable[[str], None]) -> Path:
        """Build the cell; return its wheel, left in `staging`."""


class LocalRunner:
    """Builds on the host, with toolkits and torch environments from the factory's cache."""

    name = "local"

    def __init__(self, cache: Path, options: BuildOptions) -> None:
        self.cache = cache
        self.options = options

    def build(self, cell: Cell, staging: Path, log: Log, threads: int,
              progress: Callable[[str], None]) -> Path:
        return build_cell(cell, self.cache, self.options, staging, log, threads, progress)
