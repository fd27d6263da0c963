"""What a command ends with: the kernel tests' table, the stable-ABI wheels' cells, the index's
summary line and its warnings."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..cells.run import CellResult, CellTests
from ..config.model import SizeLimit
from ..index.update import IndexSummary
from ..plan.model import Plan
from ..values.units import human_size
from .console import make_console, say_error

__all__ = ["SITE_WARNING", "show_index", "show_served", "show_tests"]

# A site's size is warned of from this share of its host's limit on.
SITE_WARNING = 0.8


def show_index(console: Console, out: Path, summary: IndexSummary,
               site_limit: SizeLimit | None = None) -> None:
    """The index summary line, a warning when the site nears `site_limit`, and one error line
    for each file the index left out or put right."""
    console.print(f"index: {summary.wheels} wheel(s) of {summary.projects} project(s), "
                  f"{human_size(summary.wheel_bytes)}, in {out}/simple/ and one index per cell "
                  f"({', '.join(summary.labels) or 'none yet'})"
                  + (f", variants in {', '.join(f'{out}/{name}/' for name in summary.variants)}"
                     if summary.variants else "")
                  + f"; {summary.pages_written} "
                  f"page(s) written, {summary.pages_removed} removed", markup=False,
                  soft_wrap=True)
    errors = make_console(stderr=True)
    if site_limit is not None and summary.wheel_bytes >= SITE_WARNING * site_limit.bytes:
        share = summary.wheel_bytes / site_limit.bytes
        errors.print(f"warning: {out} holds {human_size(summary.wheel_bytes)} of wheels, "
                     f"{share:.0%} of {site_limit.describe()} for a published site; serve "
                     "the wheels from elsewhere (release assets, a bucket) before it is full",
                     markup=False, soft_wrap=True)
    for problem in summary.problems:
        say_error(errors, problem)


def show_served(console: Console, plan: Plan, results: list[CellResult]) -> None:
    """One line per stable-ABI cell with a wheel: the cells whose indexes list it."""
    kept = {result.cell_id for result in results if result.status in ("built", "unchanged")}
    for cell in plan.cells:
        served = plan.serves(cell.id)
        if served and cell.id in kept:
            console.print(f"{cell.id}: one stable-ABI wheel (torch{cell.torch_pin}) for the "
                          f"cells {', '.join(s.label for s in served)}", markup=False,
                          soft_wrap=True)


VERDICT_STYLES = {"proven": "green", "untested": "yellow", "failed": "red"}


def show_tests(console: Console, tested: list[CellTests], require_gpu: bool) -> None:
    """Each cell's verdict and what its tests showed, one row each."""
    table = Table(title="kernel tests", title_justify="left")
    for column in ("cell", "verdict", "tests", "log"):
        table.add_column(column, overflow="fold")
    for entry in tested:
        report = entry.report
        if report is None:
            table.add_row(entry.cell_id, Text("failed", style="red"),
                          Text(f"not run: {entry.detail}"), str(entry.log))
            continue
        verdict = report.verdict
        style = "red" if entry.failed(require_gpu) else VERDICT_STYLES[verdict]
        held = " (required: the wheel is not published)" \
            if verdict == "untested" and entry.required else ""
        table.add_row(entry.cell_id, Text(verdict + held, style=style),
                      Text(report.describe()), str(entry.log))
    console.print(table)
    if require_gpu and any(entry.report and entry.report.verdict == "proven" and
                           not entry.report.gpus for entry in tested):
        console.print("--require-gpu: some cells' tests ran with no GPU", markup=False)
