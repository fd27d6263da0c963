"""The voice the pipeline speaks through (pipeline/voice.py), on a console."""

from __future__ import annotations

from rich.console import Console

from ..cells.run import CellTests
from .console import say_to
from .outcomes import show_tests
from .progress import make_reporter

__all__ = ["ConsoleVoice"]


class ConsoleVoice:
    """Notes as plain lines, warnings in yellow, the cells' progress live (or as timestamped
    lines off a terminal), the tests as a table."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.reporter = make_reporter(console)
        self.note = say_to(console)
        self.warn = say_to(console, "yellow")

    def tested(self, entries: list[CellTests], require_gpu: bool) -> None:
        show_tests(self.console, entries, require_gpu)
