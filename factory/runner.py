"""Runners decide where a cell is built. The local runner builds on this machine."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from .cellbuild import build_cell
from .matrix.plan import Cell
from .process import Log


class Runner(Protocol):
    name: str

    def build(self, cell: Cell, staging: Path, log: Log, threads: int,
              progress: Callable[[str], None]) -> Path:
        """Build the cell; return its wheel, left in `staging`."""


class LocalRunner:
    """Builds on the host, with toolkits and torch environments from the factory's cache."""

    name = "local"

    def __init__(self, cache: Path) -> None:
        self.cache = cache

    def build(self, cell: Cell, staging: Path, log: Log, threads: int,
              progress: Callable[[str], None]) -> Path:
        return build_cell(cell, self.cache, staging, log, threads, progress)
