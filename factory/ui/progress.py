"""What `factory build` shows while it works: a live table on a terminal, plain timestamped lines
elsewhere (CI logs), and the same summary table at the end."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from ..cells.run import Activity, CellResult, CellStatus
from ..plan.model import SkippedCell
from ..prove.tests import VERDICTS

__all__ = ["LiveReporter", "PlainReporter", "make_reporter", "print_summary"]

STYLES = {"queued": "dim", "building": "cyan", "built": "green", "unchanged": "green",
          "compiled": "green", "failed": "bold red", "skipped": "yellow", "untested": "yellow"}


@dataclass
class _Row:
    status: str = "queued"
    detail: str = ""
    started: float | None = None
    ended: float | None = None

    def elapsed(self, now: float) -> str:
        if self.started is None:
            return ""
        return f"{(self.ended or now) - self.started:.0f}s"


@dataclass
class _Board:
    rows: dict[str, _Row] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def set(self, cell_id: str, status: str, detail: str) -> _Row:
        with self.lock:
            row = self.rows.setdefault(cell_id, _Row())
            now = time.monotonic()
            if status == "building" and row.started is None:
                row.started = now
            if status in ("built", "compiled", "failed", "unchanged", "untested"):
                row.ended = now
            row.status, row.detail = status, detail
            return row


class PlainReporter:
    """One line per change of a cell's state, for logs that are read afterwards."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.board = _Board()
        self.t0 = time.monotonic()

    def start(self, cells: list[str], skipped: list[SkippedCell]) -> None:
        self.console.print(f"{len(cells)} cell(s) to build, {len(skipped)} skipped", markup=False)
        for item in skipped:
            self._line(item.id, "skipped", item.reason)

    def update(self, cell_id: str, status: CellStatus | Activity, detail: str = "") -> None:
        self.board.set(cell_id, status, detail)
        self._line(cell_id, status, detail)

    def _line(self, cell_id: str, status: str, detail: str) -> None:
        stamp = time.monotonic() - self.t0
        text = Text(f"[{stamp:6.1f}s] {cell_id}: ")
        text.append(status, style=STYLES.get(status, ""))
        if detail:
            text.append(f" ({detail})")
        self.console.print(text, soft_wrap=True)

    def stop(self) -> None:
        pass

    def finish(self, results: list[CellResult]) -> None:
        print_summary(self.console, results)


class LiveReporter:
    """A table that redraws in place on a terminal."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.board = _Board()
        self.live = Live(console=console, refresh_per_second=4, transient=True,
                         get_renderable=self._table)

    def start(self, cells: list[str], skipped: list[SkippedCell]) -> None:
        for cell_id in cells:
            self.board.set(cell_id, "queued", "")
        for item in skipped:
            self.board.set(item.id, "skipped", item.reason)
        self.live.start()

    def update(self, cell_id: str, status: CellStatus | Activity, detail: str = "") -> None:
        self.board.set(cell_id, status, detail)

    def _table(self) -> Table:
        table = Table(box=None, pad_edge=False)
        for column in ("cell", "status", "time", ""):
            table.add_column(column)
        now = time.monotonic()
        with self.board.lock:
            for cell_id, row in self.board.rows.items():
                table.add_row(Text(cell_id), Text(row.status, style=STYLES.get(row.status, "")),
                              row.elapsed(now), Text(row.detail, overflow="ellipsis"))
        return table

    def stop(self) -> None:
        """Take the live table off the screen (also when the build is interrupted)."""
        self.live.stop()

    def finish(self, results: list[CellResult]) -> None:
        print_summary(self.console, results)


UNCONFINED = "its code ran unconfined (--unconfined)"


def print_summary(console: Console, results: list[CellResult]) -> None:
    table = Table(title="factory build", title_justify="left")
    for column in ("cell", "status", "seconds", "wheel / reason"):
        table.add_column(column, overflow="fold")
    for result in results:
        outcome = "\n".join(part for part in (result.wheel or result.detail,
                                               result.describe_size(),
                                               result.describe_units(),
                                               _verdict(result),
                                               UNCONFINED if result.unconfined else "") if part)
        if result.status in ("failed", "untested") and result.log is not None:
            outcome = f"{result.detail}\nlog: {result.log}"
        status = Text(result.status, style=STYLES.get(result.status, ""))
        timed = result.status in ("built", "compiled", "failed", "untested")
        table.add_row(Text(result.cell_id), status, f"{result.seconds:.1f}" if timed else "",
                      Text(outcome))
    console.print(table)
    statuses = ("built", "compiled", "unchanged", "failed", "untested", "skipped")
    counts = {status: sum(r.status == status for r in results) for status in statuses}
    if results and counts["unchanged"] == len(results) - counts["skipped"] and counts["unchanged"]:
        console.print(f"Nothing to rebuild: all {counts['unchanged']} cell(s) are up to date.",
                      markup=False)
    console.print(", ".join(f"{n} {status}" for status, n in counts.items()
                            if n or status not in ("compiled", "untested")), markup=False)
    verdicts = [result.tested.verdict for result in results if result.tested is not None]
    if verdicts:
        console.print("kernel tests: " + ", ".join(
            f"{verdicts.count(verdict)} {verdict}" for verdict in VERDICTS
            if verdict in verdicts), markup=False)
    unconfined = sum(result.unconfined for result in results)
    if unconfined:
        console.print(f"--unconfined: the kernel's code of {unconfined} cell(s) ran outside "
                      "the sandbox, with your rights, files and network", markup=False)
    units = [result.units for result in results if result.units is not None]
    if units:
        console.print(f"units: {sum(u[1] for u in units)} compiled, {sum(u[2] for u in units)} "
                      "from the object cache", markup=False)


def _verdict(result: CellResult) -> str:
    """What the kernel's tests said of a published wheel, in a word and a reason."""
    if result.tested is None or result.status not in ("built", "unchanged"):
        return ""
    reason = result.tested.reason
    return f"{result.tested.verdict}{': ' + reason if reason else ''}"


def make_reporter(console: Console) -> LiveReporter | PlainReporter:
    return LiveReporter(console) if console.is_terminal else PlainReporter(console)
