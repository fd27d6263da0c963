"""`factory build`: run every cell of a plan, each in its own log, and publish their wheels.

A failed cell never stops or corrupts the others. A cell whose inputs (its fingerprint) are the
same as at its last successful build, and whose wheel is still in place, is not rebuilt. Each
wheel is judged by the gates once, and its report is handed on (CellResult.published), so the
index takes its facts from the build instead of reading the wheel again. Wheels are published
into <out>/files with an atomic rename; a published file is never overwritten with different
bytes unless the user asks (--force).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from .. import __version__
from ..errors import BuildError, FactoryError
from ..files import file_sha256, process_alive, write_atomic
from ..layout import Layout, refuse_links
from ..plan.cells import Cell, Plan, SkippedCell
from ..process import Log
from ..wheel.read import WheelFile
from .checks import check_cell_wheel
from .runners import Runner

__all__ = ["CellResult", "CellStatus", "Reporter", "cell_fingerprint", "run_build"]

CellStatus = Literal["built", "unchanged", "failed", "skipped"]
Activity = Literal["queued", "building"]


@dataclass(frozen=True)
class CellResult:
    cell_id: str
    status: CellStatus
    seconds: float
    wheel: str | None = None
    detail: str | None = None
    log: Path | None = None
    published: WheelFile | None = None  # a wheel this run built and published


class Reporter(Protocol):
    def start(self, cells: list[str], skipped: list[SkippedCell]) -> None: ...
    def update(self, cell_id: str, status: CellStatus | Activity, detail: str = "") -> None: ...
    def finish(self, results: list[CellResult]) -> None: ...
    def stop(self) -> None: ...


def run_build(plan: Plan, out: Path, runner: Runner, jobs: int, reporter: Reporter,
              force: bool = False) -> list[CellResult]:
    """Build the plan's cells, `jobs` at a time, with a runner its caller holds open. When
    interrupted, the cells still building are left to end as the runner closes."""
    layout = Layout(out)
    refuse_links(out)
    for folder in (layout.files, layout.logs, layout.state, layout.staging):
        folder.mkdir(parents=True, exist_ok=True)
    _remove_abandoned_staging(layout.staging)
    cells = list(plan.cells)
    reporter.start([cell.id for cell in cells], list(plan.skipped))
    threads = max(1, (os.cpu_count() or 1) // max(1, jobs))
    stopping = threading.Event()

    def one(cell: Cell) -> CellResult:
        return _run_cell(cell, layout, runner, threads, reporter, force, stopping)

    pool = ThreadPoolExecutor(max_workers=jobs)
    try:
        results = list(pool.map(one, cells))
    except BaseException:
        stopping.set()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    finally:
        reporter.stop()
    pool.shutdown()
    results += [CellResult(s.id, "skipped", 0.0, detail=s.reason) for s in plan.skipped]
    reporter.finish(results)
    return results


def _remove_abandoned_staging(staging: Path) -> None:
    """Staging folders of builds that were killed: each is named after its process, and one
    whose process is gone is removed (a live one may be another build into the same folder)."""
    for folder in staging.iterdir():
        pid = folder.name.split("-", 1)[0]
        if pid.isdigit() and folder.is_dir() and not folder.is_symlink() and \
                not process_alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _run_cell(cell: Cell, layout: Layout, runner: Runner, threads: int, reporter: Reporter,
              force: bool, stopping: threading.Event) -> CellResult:
    environment = {**runner.facts(cell), "build_root": str(runner.options.build_root)}
    fingerprint = cell_fingerprint(cell, environment, runner.name)
    recorded = _recorded_state(layout, cell)
    unchanged = _unchanged_wheel(layout, recorded, fingerprint)
    if unchanged is not None:
        reporter.update(cell.id, "unchanged", unchanged)
        return CellResult(cell.id, "unchanged", 0.0, wheel=unchanged,
                          log=layout.log_file(cell.key))

    started = time.monotonic()
    log_path = layout.log_file(cell.key)
    reporter.update(cell.id, "building")
    with open(log_path, "w", encoding="utf-8") as handle:
        log = Log(handle)
        log.write(f"kernel-wheel-factory {__version__}: building {cell.id} "
                  f"({cell.spec.name} {cell.wheel_version}) with the {runner.name} runner")
        try:
            staging = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=layout.staging))
            try:
                staged = runner.build(cell, staging, log, threads,
                                      lambda step: reporter.update(cell.id, "building", step))
                reporter.update(cell.id, "building", "checking")
                report = check_cell_wheel(cell, staged, log)
                wheel = _publish(staged, report.sha256, layout.files, force,
                                 recorded.get("sha256") if recorded.get("wheel") == staged.name
                                 else None)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        except Exception as exc:  # a bug fails this cell, not the whole run
            if stopping.is_set():  # the run was interrupted: its compilers were stopped
                log.write("\nINTERRUPTED: the build was stopped (Ctrl-C or SIGTERM) before "
                          "this cell finished")
                return CellResult(cell.id, "failed", time.monotonic() - started,
                                  detail="interrupted", log=log_path)
            if isinstance(exc, FactoryError):
                detail = str(exc)
            else:
                detail = f"internal error: {exc!r}"
                log.write(traceback.format_exc())
            log.write(f"\nFAILED: {detail}")
            reporter.update(cell.id, "failed", detail)
            return CellResult(cell.id, "failed", time.monotonic() - started, detail=detail,
                              log=log_path)
        seconds = time.monotonic() - started
        log.write(f"\nbuilt {wheel.name} in {seconds:.1f} s")
    _write_json(layout.state_file(cell.key), {
        "fingerprint": fingerprint, "wheel": wheel.name, "sha256": report.sha256,
    })
    reporter.update(cell.id, "built", wheel.name)
    return CellResult(cell.id, "built", seconds, wheel=wheel.name, log=log_path,
                      published=report.wheel)


def cell_fingerprint(cell: Cell, environment: dict[str, Any], runner: str) -> str:
    """Everything known before building that decides what the cell's wheel will be."""
    facts: dict[str, Any] = {
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
    if cell.installed is not None:
        facts["installed_torch"] = cell.installed.to_json()
    if cell.depends:
        facts["depends"] = [dependency.record() for dependency in cell.depends]
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()


def _recorded_state(layout: Layout, cell: Cell) -> dict[str, Any]:
    """What the last build of this cell into this folder recorded (empty when nothing)."""
    try:
        state = json.loads(layout.state_file(cell.key).read_text())
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def _unchanged_wheel(layout: Layout, state: dict[str, Any], fingerprint: str) -> str | None:
    if state.get("fingerprint") != fingerprint:
        return None
    wheel = layout.files / str(state.get("wheel", ""))
    if not wheel.is_file() or file_sha256(wheel) != state.get("sha256"):
        return None
    return wheel.name


def _publish(staged: Path, sha256: str, files: Path, force: bool,
             published_sha256: str | None) -> Path:
    """Move a finished wheel into files/ atomically; refuse to change a published file.
    `published_sha256` is what this folder's last build of the cell published under that name:
    a file that no longer has it was changed behind the factory's back."""
    target = files / staged.name
    if target.exists():
        present = file_sha256(target)
        if present == sha256:
            return target
        if not force and published_sha256 is not None and present != published_sha256:
            changed = (f"{target} was changed after it was published (sha256 "
                       f"{published_sha256[:12]}, now {present[:12]})")
            raise BuildError(
                f"{changed}, and this build gives the published bytes again: restore the file "
                "(or pass --force to replace it with this build)" if sha256 == published_sha256
                else f"{changed}: restore it (or pass --force to replace it)")
        if not force:
            raise BuildError(
                f"{target} is already published with different content; published files are "
                "immutable: raise the kernel's version in the matrix (or pass --force)")
    os.replace(staged, target)
    return target


def _write_json(path: Path, data: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(data, indent=1, sort_keys=True))
