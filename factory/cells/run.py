"""`factory build`: run every cell of a plan, each in its own log, and publish their wheels.

A failed cell never stops or corrupts the others. A cell whose inputs (its fingerprint) are the
same as at its last successful build, and whose wheel is still in place, is not rebuilt. The
compilers of the cells built at once share one budget of cores and memory, and one object
cache; a time limit stops the compilers cleanly (what they finished is kept for the next run).
Each wheel is judged by the gates once, and its report is handed on (CellResult.published), so the
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
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol

from .. import __version__, defaults
from ..compile.costbook import COSTS_FOLDER, CostBook, known_costs
from ..compile.objects import ObjectCache
from ..compile.pool import Budget, CompilePool, grace_for, machine_budget
from ..compile.remote import RemoteStore
from ..config.model import SizeLimit
from ..errors import BuildError, FactoryError, Unavailable
from ..outputs.files import file_sha256, process_alive
from ..outputs.journal import note_publishing, pending
from ..outputs.layout import Layout, refuse_links
from ..plan.costs import UnitCost, shard_of
from ..plan.model import Cell, SkippedCell
from ..plan.placement import PlacedPlan
from ..prove.load import LoadReport, importable_modules, load_problems
from ..prove.tests import TestReport
from ..system.process import Log
from ..values.units import human_size
from ..wheel.read import WheelFile
from .checks import check_cell_wheel
from .job import Built, Compiling, loadable, testable
from .runners import Runner, Runners
from .state import CellState, Proof

__all__ = ["CellResult", "CellStatus", "CellTests", "Reporter", "RunSettings", "cell_fingerprint",
           "run_build", "test_cells", "requires_tests"]

# untested: a wheel that passed every gate, whose tests could not run, kept from the index
# because its tests are required
CellStatus = Literal["built", "unchanged", "compiled", "failed", "skipped", "untested"]
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
    units: tuple[int, int, int] | None = None  # the cell's units: all, compiled, from the cache
    loaded: LoadReport | None = None  # what the import gate saw of its wheel
    tested: TestReport | None = None  # the kernel's own tests against its wheel
    sizes: tuple[int, int | None] | None = None  # its wheel's bytes, and installed (when read)
    unconfined: bool = False  # the kernel's code ran outside the sandbox (--unconfined)
    proofs: tuple[Proof, ...] = ()  # a pure-Python wheel for all: its gates in each CUDA cell

    def describe_size(self) -> str:
        if self.sizes is None:
            return ""
        size, installed = self.sizes
        return human_size(size) + (f", {human_size(installed)} installed" if installed else "")

    def describe_units(self) -> str:
        if self.units is None:
            return ""
        total, compiled, cached = self.units
        return f"{compiled} compiled, {cached} from the object cache, of {total} unit(s)"


@dataclass(frozen=True)
class RunSettings:
    """How a run shares the machine, its object cache and its time."""

    key: bytes = field(repr=False)  # the object cache's key: publish notes are signed
    cells: int = defaults.CELLS  # cells built at once
    budget: Budget | None = None  # cores and memory for compilers (None: this machine's)
    objects: Path | None = None  # the object cache (None: no object cache)
    object_cache_limit: int = defaults.OBJECT_CACHE_LIMIT
    time_limit: float | None = None  # seconds: no compiler starts that would end later
    unit_shard: tuple[int, int] | None = None  # compile shard I of N of each cell, link none
    export_objects: Path | None = None  # copy the objects this run used or made here
    force: bool = False  # replace a published wheel whose bytes changed
    test: bool = False  # run the kernel's tests against each wheel before it is published
    require_tests: bool = False  # publish no wheel whose tests could not run (untested)
    require_gpu: bool = False  # fail a cell whose tests saw no GPU
    max_wheel_size: SizeLimit | None = None  # the size gate's limit per wheel
    verify_objects: float = 0.0  # the share of cached units compiled again to compare
    object_store: RemoteStore | None = None  # the store shared by machines, behind the cache
    # what the index published under each name, its file there or not (names keep their bytes)
    published: Mapping[str, str] = field(default_factory=dict)


class Reporter(Protocol):
    def start(self, cells: list[str], skipped: list[SkippedCell]) -> None: ...
    def update(self, cell_id: str, status: CellStatus | Activity, detail: str = "") -> None: ...
    def finish(self, results: list[CellResult]) -> None: ...
    def stop(self) -> None: ...


def run_build(plan: PlacedPlan, out: Path, runners: Runners, reporter: Reporter,
              settings: RunSettings) -> list[CellResult]:
    """Build the plan's cells, `settings.cells` at a time, each by the runner of its placement
    (the caller holds them open).
    When interrupted, the compilers still running are stopped."""
    layout = Layout(out)
    refuse_links(out)
    for folder in (layout.files, layout.logs, layout.state, layout.staging):
        folder.mkdir(parents=True, exist_ok=True)
    _remove_abandoned_staging(layout.staging)
    cells = list(plan.cells)
    reporter.start([cell.id for cell in cells], list(plan.skipped))
    deadline = None if settings.time_limit is None else time.monotonic() + settings.time_limit
    pool = CompilePool(settings.budget or machine_budget(), deadline,
                       grace_for(settings.time_limit))
    objects = ObjectCache(settings.objects, settings.key, settings.object_cache_limit,
                          settings.object_store) if settings.objects is not None else None
    book = CostBook(settings.objects / COSTS_FOLDER) if settings.objects is not None else None
    travelling = CostBook(plan.matrix.costs) if plan.matrix.costs is not None else None
    stopping = threading.Event()

    def one(cell: Cell) -> CellResult:
        only = None
        if settings.unit_shard is not None:
            index, count = settings.unit_shard
            shared = travelling.read(cell.spec.name) if travelling else None
            only = frozenset(shard_of(cell, count, shared)[index - 1])

        def measured(key: str, cost: UnitCost) -> None:
            if book is not None:
                book.record(cell.spec.name, {key: cost})

        compiling = Compiling(pool, objects, known_costs(cell.spec.name, (travelling, book)),
                              measured, only, settings.unit_shard, cells=settings.cells,
                              verify=settings.verify_objects)
        return _run_cell(cell, layout, runners.of(cell), compiling, reporter, settings,
                         stopping)

    executor = ThreadPoolExecutor(max_workers=settings.cells)
    try:
        results = list(executor.map(one, cells))
    except BaseException:
        stopping.set()
        pool.stop()
        executor.shutdown(wait=False, cancel_futures=True)
        raise
    finally:
        reporter.stop()
    executor.shutdown()
    if objects is not None:
        if settings.export_objects is not None:
            objects.export(settings.export_objects)
            if book is not None:
                book.export({cell.spec.name for cell in cells},
                            settings.export_objects / COSTS_FOLDER)
        objects.evict()
    results += [CellResult(s.id, "skipped", 0.0, detail=s.reason) for s in plan.skipped]
    reporter.finish(results)
    return results


@dataclass(frozen=True)
class CellTests:
    """The kernel's tests against one cell's published wheel: their report (which says why
    when they could not start), or why there is none (no wheel yet, a suite that crashed)."""

    cell_id: str
    wheel: str | None
    report: TestReport | None
    detail: str | None
    log: Path
    required: bool = False  # an untested wheel fails the run

    def failed(self, require_gpu: bool) -> bool:
        """The tests failed, could not run where they are required, or, with `require_gpu`,
        proved the wheel without a GPU."""
        if self.report is None:
            return True
        verdict = self.report.verdict
        return verdict == "failed" or (verdict == "untested" and self.required) or \
            (require_gpu and verdict == "proven" and not self.report.gpus)


def requires_tests(cell: Cell, require_tests: bool) -> bool:
    """Whether a wheel of the cell whose tests could not run is kept from the index:
    --require-tests for every cell, else the kernel's `tests: {required: ...}` (or the
    matrix's), else the default."""
    if require_tests:
        return True
    return cell.tests.required if cell.tests.required is not None else defaults.TESTS_REQUIRED


def test_cells(plan: PlacedPlan, out: Path, runners: Runners, say: Callable[[str], None],
               require_tests: bool = False) -> list[CellTests]:
    """Run each cell's kernel tests against the wheel its last build published into `out`
    (one after the other: they may share a GPU); each report is kept in the cell's state."""
    layout = Layout(out)
    layout.logs.mkdir(parents=True, exist_ok=True)
    results = []
    for cell in plan.cells:
        log_path = layout.logs / f"{cell.key}.tests.log"
        required = requires_tests(cell, require_tests)
        state = CellState.read(layout.state_file(cell.key))
        wheel = layout.files / (state.wheel if state else "")
        if state is None or not wheel.is_file():
            results.append(CellTests(cell.id, None, None, "no wheel of this cell is published "
                                     f"in {out}: build it first", log_path, required))
            continue
        say(f"testing {cell.id} ({wheel.name})")
        with open(log_path, "w", encoding="utf-8") as handle:
            log = Log(handle)
            proofs = state.proofs
            try:
                if cell.proofs:  # a pure-Python wheel for all: in each CUDA cell
                    proofs = tuple(Proof(proof.id, None, _kernel_tests(
                        proof, runners.of(cell), wheel, log)) for proof in cell.proofs)
                    verdict = _wheel_verdict(proofs)
                    assert verdict is not None  # every cell's tests gave a report
                    report = verdict
                else:
                    report = _kernel_tests(cell, runners.of(cell), wheel, log)
            except FactoryError as exc:
                log.write(f"\nFAILED: {exc}")
                results.append(CellTests(cell.id, wheel.name, None, str(exc), log_path,
                                         required))
                continue
            log.write(f"\n{report.verdict}: {report.describe()}")
        kept = {proof.cell: proof.loaded for proof in state.proofs}
        replace(state, tests=report, unconfined=state.unconfined or _unconfined(
            runners.of(cell)), proofs=tuple(replace(proof, loaded=kept.get(proof.cell))
                                            for proof in proofs)).write(
            layout.state_file(cell.key))
        results.append(CellTests(cell.id, wheel.name, report, None, log_path, required))
    return results


def _remove_abandoned_staging(staging: Path) -> None:
    """Staging folders of builds that were killed: each is named after its process, and one
    whose process is gone is removed (a live one may be another build into the same folder)."""
    for folder in staging.iterdir():
        pid = folder.name.split("-", 1)[0]
        if pid.isdigit() and folder.is_dir() and not folder.is_symlink() and \
                not process_alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _run_cell(cell: Cell, layout: Layout, runner: Runner, compiling: Compiling,
              reporter: Reporter, settings: RunSettings,
              stopping: threading.Event) -> CellResult:
    environment = {**runner.facts(cell), "build_root": str(runner.options.build_root),
                   "index_url": runner.options.index_url}
    fingerprint = cell_fingerprint(cell, environment, runner.name)
    recorded = CellState.read(layout.state_file(cell.key))
    shard = compiling.only is not None
    if not shard and recorded is not None and _unchanged(layout, recorded, fingerprint):
        reporter.update(cell.id, "unchanged", recorded.wheel)
        return _unchanged_result(cell, layout, recorded)
    started = time.monotonic()
    log_path = layout.log_file(cell.key)
    if compiling.pool.expired:
        detail = "not started: the time limit was reached"
        reporter.update(cell.id, "failed", detail)
        return CellResult(cell.id, "failed", 0.0, detail=detail)
    reporter.update(cell.id, "building")
    with open(log_path, "w", encoding="utf-8") as handle:
        log = Log(handle)
        _log_head(log, cell, runner.name, settings.unit_shard if shard else None)
        try:
            staging = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=layout.staging))
            try:
                built = runner.build(cell, staging, log, compiling,
                                     lambda step: reporter.update(cell.id, "building", step))
                units = (built.units, built.compiled, built.cached) if built.units else None
                if built.wheel is None:
                    return _compiled_shard(cell, built, time.monotonic() - started, log,
                                           log_path, reporter)
                reporter.update(cell.id, "building", "checking")
                report = check_cell_wheel(cell, built.wheel, log, settings.max_wheel_size)
                loaded, tested, proofs = _gates(cell, runner, built.wheel, report.files,
                                                settings, log, reporter)
                wheel = _publish(built.wheel, report.sha256, layout, settings.key, cell.id,
                                 settings.force,
                                 recorded.sha256 if recorded is not None
                                 and recorded.wheel == built.wheel.name else None,
                                 settings.published.get(built.wheel.name))
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        except Exception as exc:  # a bug fails this cell, not the whole run
            return _cell_failed(cell, exc, log, log_path, reporter,
                                time.monotonic() - started, stopping.is_set())
        seconds = time.monotonic() - started
        log.write(f"\nbuilt {wheel.name} in {seconds:.1f} s ({built.compiled} unit(s) "
                  f"compiled, {built.cached} from the object cache)")
    unconfined = _unconfined(runner)
    CellState(fingerprint, wheel.name, report.sha256, loaded, tested,
              report.wheel.installed_size, unconfined, proofs).write(layout.state_file(cell.key))
    reporter.update(cell.id, "built", wheel.name)
    return CellResult(cell.id, "built", seconds, wheel=wheel.name, log=log_path,
                      published=report.wheel, units=units, loaded=loaded, tested=tested,
                      sizes=(report.size, report.wheel.installed_size), unconfined=unconfined,
                      proofs=proofs)


def _unconfined(runner: Runner) -> bool:
    """Whether the kernel's code ran outside the sandbox: on this machine, under
    --unconfined (the docker runner's containers confine it whatever the options)."""
    return runner.name == "local" and runner.options.unconfined


def _unchanged_result(cell: Cell, layout: Layout, recorded: CellState) -> CellResult:
    """A cell whose published wheel still fits it: what its last build recorded."""
    return CellResult(cell.id, "unchanged", 0.0, wheel=recorded.wheel,
                      log=layout.log_file(cell.key), loaded=recorded.loaded,
                      tested=recorded.tests,
                      sizes=((layout.files / recorded.wheel).stat().st_size,
                             recorded.installed_size), unconfined=recorded.unconfined,
                      proofs=recorded.proofs)


def _log_head(log: Log, cell: Cell, runner: str, unit_shard: tuple[int, int] | None) -> None:
    log.write(f"kernel-wheel-factory {__version__}: building {cell.id} "
              f"({cell.spec.name} {cell.wheel_version}) with the {runner} runner")
    if unit_shard is not None:
        log.write(f"compiling shard {unit_shard[0]}/{unit_shard[1]} of its units into the "
                  "object cache; nothing is linked")


def _cell_failed(cell: Cell, exc: Exception, log: Log, log_path: Path, reporter: Reporter,
                 seconds: float, stopped: bool) -> CellResult:
    """What a cell that raised `exc` ended as: interrupted (the run was stopped), untested
    (tests required and not run), skipped (it needs what this machine cannot have) or failed
    (a bug's traceback goes to its log); said in the log and to the reporter."""
    if stopped:  # the run was interrupted: its compilers were stopped
        log.write("\nINTERRUPTED: the build was stopped (Ctrl-C or SIGTERM) before "
                  "this cell finished")
        return CellResult(cell.id, "failed", seconds, detail="interrupted", log=log_path)
    if isinstance(exc, Untested):
        log.write(f"\nUNTESTED: {exc}")
        reporter.update(cell.id, "untested", str(exc))
        return CellResult(cell.id, "untested", seconds, detail=str(exc), log=log_path,
                          tested=exc.report)
    if isinstance(exc, Unavailable):
        log.write(f"\nSKIPPED: {exc}")
        reporter.update(cell.id, "skipped", str(exc))
        return CellResult(cell.id, "skipped", seconds, detail=str(exc), log=log_path)
    if isinstance(exc, FactoryError):
        detail = str(exc)
    else:
        detail = f"internal error: {exc!r}"
        log.write(traceback.format_exc())
    log.write(f"\nFAILED: {detail}")
    reporter.update(cell.id, "failed", detail)
    return CellResult(cell.id, "failed", seconds, detail=detail, log=log_path)


class Untested(BuildError):
    """A wheel whose tests could not run, where tests are required: not published."""

    def __init__(self, message: str, report: TestReport) -> None:
        super().__init__(message)
        self.report = report


def _test_gate(cell: Cell, runner: Runner, wheel: Path, settings: RunSettings,
               log: Log) -> TestReport:
    """The kernel's own tests against the wheel, before it is published: a failure fails the
    cell; tests that could not run keep the wheel out where tests are required (Untested)."""
    tested = _kernel_tests(cell, runner, wheel, log)
    log.write(f"   kernel tests: {tested.verdict}: {tested.describe()}")
    return _judged(cell, wheel, tested, settings)


def _gates(cell: Cell, runner: Runner, wheel: Path, files: Iterable[str],
           settings: RunSettings, log: Log, reporter: Reporter
           ) -> tuple[LoadReport | None, TestReport | None, tuple[Proof, ...]]:
    """The wheel imported (and with --test tested) before it is published: where the cell
    was built, or, for a pure-Python wheel for all, in each CUDA cell of the matrix."""
    reporter.update(cell.id, "building", "importing")
    if cell.proofs:
        return _proven_in_cells(cell, runner, wheel, files, settings, log)
    loaded = _import_gate(cell, runner, wheel, files, log)
    tested = None
    if settings.test:
        reporter.update(cell.id, "building", "testing")
        tested = _test_gate(cell, runner, wheel, settings, log)
    return loaded, tested, ()


def _proven_in_cells(cell: Cell, runner: Runner, wheel: Path, files: Iterable[str],
                     settings: RunSettings, log: Log
                     ) -> tuple[LoadReport | None, TestReport | None, tuple[Proof, ...]]:
    """A pure-Python wheel for all, imported (and with --test tested) in each CUDA cell of the
    matrix with that cell's torch, where its users run it: an import or a test that fails in
    any cell fails the wheel (it is the one wheel of them all). Each cell's outcome is kept;
    the wheel's own verdict is that of the first cell that proved it, else of the first
    cell's tests."""
    proofs = []
    for proof in cell.proofs:
        assert proof.cuda is not None
        log.step(f"proving the wheel in {proof.id} (torch {proof.torch_shown}, CUDA "
                 f"{proof.cuda.version})")
        loaded = _import_gate(proof, runner, wheel, files, log)
        tested = _kernel_tests(proof, runner, wheel, log) if settings.test else None
        if tested is not None:
            log.write(f"   kernel tests: {tested.verdict}: {tested.describe()}")
            if tested.verdict == "failed":
                raise BuildError(f"{wheel.name} failed the kernel's tests in {proof.id}: "
                                 f"{tested.describe()}")
        proofs.append(Proof(proof.id, loaded, tested))
    tested = _wheel_verdict(proofs)
    if tested is not None:
        tested = _judged(cell, wheel, tested, settings)
    return (proofs[0].loaded if proofs else None), tested, tuple(proofs)


def _wheel_verdict(proofs: Iterable[Proof]) -> TestReport | None:
    """A pure-Python wheel's own verdict from its cells' tests: a cell's failure, else the
    first cell that proved it, else the first cell's tests (None: none ran)."""
    reports = [proof.tests for proof in proofs if proof.tests is not None]
    return next((report for report in reports if report.verdict == "failed"),
                next((report for report in reports if report.verdict == "proven"),
                     reports[0] if reports else None))


def _judged(cell: Cell, wheel: Path, tested: TestReport, settings: RunSettings) -> TestReport:
    """The tests' verdict as the run requires it: failed tests fail the cell; tests that
    could not run keep the wheel out where tests are required (Untested), and tests that ran
    with no GPU where one is required (--require-gpu)."""
    if tested.verdict == "failed":
        raise BuildError(f"{wheel.name} failed the kernel's tests: {tested.describe()}")
    if tested.verdict == "untested" and requires_tests(cell, settings.require_tests):
        raise Untested(f"not published: its tests could not run ({tested.reason}), and tests "
                       "are required", tested)
    if settings.require_gpu and tested.verdict == "proven" and not tested.gpus:
        raise BuildError(f"the kernel's tests of {wheel.name} ran with no GPU "
                         "(--require-gpu)")
    return tested


def _kernel_tests(cell: Cell, runner: Runner, wheel: Path, log: Log) -> TestReport:
    """The kernel's tests run against the wheel where the runner runs them, or, where they
    cannot prove it, an untested report that says why."""
    reason = testable(cell)
    if reason is None:
        return runner.test(cell, wheel, log)
    log.write(f"   not tested: {reason}")
    return TestReport.untested(reason)


def _import_gate(cell: Cell, runner: Runner, wheel: Path, files: Iterable[str],
                 log: Log) -> LoadReport | None:
    """The wheel imported with the cell's torch where it was built; what it showed, or a
    BuildError naming what failed (the missing symbol, demangled). None: it cannot be loaded
    here, and the log says why."""
    reason = loadable(cell)
    if reason is not None:
        log.write(f"   not imported: {reason}")
        return None
    loaded = runner.load(cell, wheel, importable_modules(files), log)
    problems = load_problems(loaded, cell.needs_gil)
    for problem in problems:
        log.write(f"   gate failed: {problem}")
    if problems:
        more = f" (and {len(problems) - 1} more, see the log)" if len(problems) > 1 else ""
        raise BuildError(f"{wheel.name} failed its import gate: {problems[0]}{more}")
    log.write(f"   imported {', '.join(loaded.imported)} with torch {loaded.torch}: "
              f"{loaded.describe_ops()}")
    if loaded.free_threaded:
        log.write("   free-threaded CPython: the GIL stayed disabled" if loaded.gil_enabled_by
                  is None else f"   free-threaded CPython: loading {loaded.gil_enabled_by} "
                  "turned the GIL back on, which the kernel declares (needs-gil: true)")
    return loaded


def _compiled_shard(cell: Cell, built: Built, seconds: float, log: Log, log_path: Path,
                    reporter: Reporter) -> CellResult:
    result = CellResult(cell.id, "compiled", seconds, log=log_path,
                        units=(built.units, built.compiled, built.cached))
    log.write(f"\ncompiled the shard in {seconds:.1f} s: {result.describe_units()}")
    reporter.update(cell.id, "compiled", result.describe_units())
    return result


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
    elif cell.compiled:
        facts["cpu"] = [cell.cpu_index]
    if cell.cross:
        facts["cross"] = True
    if cell.installed is not None:
        facts["installed_torch"] = cell.installed.to_json()
    if cell.depends:
        facts["depends"] = [dependency.record() for dependency in cell.depends]
    if cell.compress not in (None, defaults.COMPRESS):
        # only a setting other than the default: cells built before compression was the
        # default keep their published wheels
        facts["compress"] = cell.compress
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()


def _unchanged(layout: Layout, state: CellState, fingerprint: str) -> bool:
    """Whether the wheel the cell's last build published stands as it was, built from the
    same inputs."""
    wheel = layout.files / state.wheel
    return state.fingerprint == fingerprint and wheel.is_file() and \
        file_sha256(wheel) == state.sha256


def _publish(staged: Path, sha256: str, layout: Layout, key: bytes, cell: str, force: bool,
             published_sha256: str | None, once: str | None = None) -> Path:
    """Move a finished wheel into files/ atomically, noted in the publish journal first,
    signed under `key` (so that a kill after the move leaves a wheel the next index update
    takes); refuse to change a published file. `published_sha256` is what this folder's last
    build of the cell published under that name: a file that no longer has it was changed
    behind the factory's back. `once` is what the index published under that name, if it ever
    did: the name keeps those bytes even after its file was removed. A file that a killed build
    of the cell moved there and no index ever published is this build's to replace."""
    target = layout.files / staged.name
    staged_now = file_sha256(staged)
    if staged_now != sha256:
        raise BuildError(
            f"{staged.name} changed after its gates judged it (sha256 {sha256[:12]}, now "
            f"{staged_now[:12]}): code that ran in its import gate or tests rewrote it, so it is "
            "not published")
    left = pending(layout.publishing, key).get(target.name)
    if left is not None and once is None and not process_alive(left.pid):
        force = True  # never published: the killed build's bytes give way to this build's
    if not target.exists() and once is not None and once != sha256 and not force:
        raise BuildError(
            f"{target.name} was published with sha256 {once[:12]} and its file removed since; "
            "published files are immutable, so this build's other bytes are not published "
            "under that name: raise the kernel's version in the matrix (or pass --force)")
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
    note_publishing(layout.publishing, key, target.name, sha256, cell)
    os.replace(staged, target)
    return target
