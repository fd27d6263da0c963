"""How the pipeline tells its caller what happens while it works, without printing anything
itself: notes (one line each), warnings, the cells' progress, the tests' outcomes."""

from __future__ import annotations

from typing import Protocol

from ..cells.run import CellTests, Reporter

__all__ = ["Voice", "status_of_tests"]


class Voice(Protocol):
    @property
    def reporter(self) -> Reporter: ...  # the cells' progress and the build's summary

    def note(self, text: str) -> None: ...
    def warn(self, text: str) -> None: ...
    def tested(self, entries: list[CellTests], require_gpu: bool) -> None: ...


def status_of_tests(entries: list[CellTests], require_gpu: bool) -> int:
    """1 when a cell's tests failed, could not run where tests are required, or, with
    `require_gpu`, proved its wheel without a GPU; else 0."""
    return int(any(entry.failed(require_gpu) for entry in entries))
