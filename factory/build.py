"""`factory build`: run every cell of a plan, each in its own log, and publish their wheels.

A failed cell never stops or corrupts the others. A cell whose inputs (its fingerprint) are the
same as at its last successful build, and whose wheel is still in place, is not rebuilt. Wheels
are published into <out>/files with an atomic rename; a published file is never overwritten
with different bytes unless the user asks (--force).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from . import __version__
from .atomic import write_atomic
from .errors import BuildError, FactoryError
from .index.records import CellOutcome
from .layout import Layout
from .matrix.plan import Cell, Plan, SkippedCell
from .process import Log
from .runner import Runner


@dataclass(frozen=True)
class CellResult:
    cell_id: str
    status: str  # "built" | "unchanged" | "failed" | "skipped"
    seconds: float
    wheel: str | None = None
    detail: str | None = None
    log: Path | None = None


class Reporter(Protocol):
    def start(self, cells: list[str], skipped: list[SkippedCell]) -> None: ...
    def update(self, cell_id: str, status: str, detail: str = "") -> None: ...
    def finish(self, results: list[CellResult]) -> None: ...
    def stop(self) -> None: ...


def run_build(plan: Plan, out: Path, runner: Runner, jobs: int, reporter: Reporter,
              force: bool = False) -> list[CellResult]:
    layout = Layout(out)
    for folder in (layout.files, layout.logs, layout.state, layout.staging):
        folder.mkdir(parents=True, exist_ok=True)
    cells = list(plan.cells)
    reporter.start([cell.id for cell in cells], list(plan.skipped))
    threads = max(1, (os.cpu_count() or 1) // max(1, jobs))

    def one(cell: Cell) -> CellResult:
        return _run_cell(cell, layout, runner, threads, reporter, force)

    pool = ThreadPoolExecutor(max_workers=jobs)
    try:
        results = list(pool.map(one, cells))
    finally:
        # The runner stops first (on Ctrl-C its containers and processes go, so the cells
        # still building end), then the workers are waited for.
        runner.close()
        pool.shutdown(wait=True, cancel_futures=True)
        reporter.stop()
    results += [CellResult(s.id, "skipped", 0.0, detail=s.reason) for s in plan.skipped]
    reporter.finish(results)
    return results


def cell_outcomes(plan: Plan, results: list[CellResult]) -> list[CellOutcome]:
    """What the index records of each cell, for the browse page's coverage grid."""
    by_id = {result.cell_id: result for result in results}
    outcomes = []
    for cell in plan.cells:
        result = by_id[cell.id]
        outcomes.append(CellOutcome(
            cell.id, cell.spec.name, cell.version, str(cell.torch) if cell.torch else None,
            str(cell.cuda.version) if cell.cuda else None, cell.label, result.status,
            result.detail, result.wheel))
    for skipped in plan.skipped:
        kernel = skipped.id.split("/")[0]
        outcomes.append(CellOutcome(
            skipped.id, kernel, skipped.version or "", str(skipped.torch) if skipped.torch else None,
            str(skipped.cuda) if skipped.cuda else None, skipped.label, "skipped", skipped.reason,
            None))
    return outcomes


def _run_cell(cell: Cell, layout: Layout, runner: Runner, threads: int, reporter: Reporter,
              force: bool) -> CellResult:
    environment = {**runner.facts(cell), "build_root": str(runner.options.build_root)}
    fingerprint = cell_fingerprint(cell, environment, runner.name)
    unchanged = _unchanged_wheel(layout, cell, fingerprint)
    if unchanged is not None:
        reporter.update(cell.id, "unchanged", unchanged)
        return CellResult(cell.id, "unchanged", 0.0, wheel=unchanged,
                          log=layout.log_file(cell))

    started = time.monotonic()
    log_path = layout.log_file(cell)
    reporter.update(cell.id, "building")
    with open(log_path, "w", encoding="utf-8") as handle:
        log = Log(handle)
        log.write(f"kernel-wheel-factory {__version__}: building {cell.id} "
                  f"({cell.spec.name} {cell.wheel_version}) with the {runner.name} runner")
        try:
            staging = Path(tempfile.mkdtemp(dir=layout.staging))
            try:
                staged = runner.build(cell, staging, log, threads,
                                      lambda step: reporter.update(cell.id, "building", step))
                wheel = publish(staged, layout.files, force)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        except Exception as exc:  # a bug fails this cell, not the whole run
            detail = str(exc) if isinstance(exc, FactoryError) else f"internal error: {exc!r}"
            log.write(f"\nFAILED: {detail}")
            reporter.update(cell.id, "failed", detail)
            return CellResult(cell.id, "failed", time.monotonic() - started, detail=detail,
                              log=log_path)
        seconds = time.monotonic() - started
        log.write(f"\nbuilt {wheel.name} in {seconds:.1f} s")
    _write_json(layout.state_file(cell), {
        "fingerprint": fingerprint, "wheel": wheel.name, "sha256": sha256_file(wheel),
    })
    reporter.update(cell.id, "built", wheel.name)
    return CellResult(cell.id, "built", seconds, wheel=wheel.name, log=log_path)


def cell_fingerprint(cell: Cell, environment: dict, runner: str) -> str:
    """Everything known before building that decides what the cell's wheel will be."""
    facts = {
        "factory": __version__, "runner": runner, "environment": environment,
        "id": cell.id, "version": cell.wheel_version, "source": cell.source.revision,
        "digest": cell.source.digest, "subdir": cell.source.subdir,
        "location": cell.source.location, "label_template": cell.label_template,
        "torch": str(cell.torch) if cell.torch else None,
        "sms": [str(sm) for sm in cell.sms],
        "sections": [[s.name, [str(a) for a in s.archs], s.skipped] for s in cell.sections],
    }
    if cell.cuda is not None:
        facts["cuda"] = [str(cell.cuda.version), str(cell.cuda.home), cell.cuda.torch_index]
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()


def _unchanged_wheel(layout: Layout, cell: Cell, fingerprint: str) -> str | None:
    try:
        state = json.loads(layout.state_file(cell).read_text())
    except (OSError, ValueError):
        return None
    if state.get("fingerprint") != fingerprint:
        return None
    wheel = layout.files / state.get("wheel", "")
    if not wheel.is_file() or sha256_file(wheel) != state.get("sha256"):
        return None
    return wheel.name


def publish(staged: Path, files: Path, force: bool) -> Path:
    """Move a finished wheel into files/ atomically; refuse to change a published file."""
    target = files / staged.name
    if target.exists():
        if sha256_file(target) == sha256_file(staged):
            return target
        if not force:
            raise BuildError(
                f"{target} is already published with different content; published files are "
                "immutable: raise the kernel's version in the matrix (or pass --force)")
    os.replace(staged, target)
    return target


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write_json(path: Path, data: dict) -> None:
    write_atomic(path, json.dumps(data, indent=1, sort_keys=True))
