"""`factory build`: from a request to cells built, kept wheels re-tested, the index brought up
to date and an exit status."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from ..cells.run import (
    CellResult,
    CellTests,
    RunSettings,
    requires_tests,
    run_build,
    test_cells,
)
from ..cells.runners import TAKES, Runners, places_for, runners_for
from ..compile.costbook import COSTS_FOLDER, CostBook
from ..compile.objects import ObjectCache
from ..compile.pool import machine_budget
from ..compile.remote import remote_store
from ..config.matrix import load_matrix
from ..config.model import Matrix
from ..defaults import host_platform
from ..errors import ConfigError
from ..index.records import file_record, load_manifest, published_names
from ..index.update import IndexSummary, update_index
from ..index.variants import make_variants
from ..outputs.layout import Layout
from ..plan.jobs import select_job, select_shard
from ..plan.model import Plan
from ..plan.placement import PlacedPlan, needs_containers, place
from ..plan.select import Selection, select_cells
from ..system.engine import Engine
from ..trust.keys import object_cache_key
from .load import plan_matrix
from .options import Given, Options, settle
from .outcomes import cell_outcomes
from .plan import new_cells
from .voice import Voice, status_of_tests

__all__ = ["BuildOutcome", "BuildRequest", "build_matrix", "choose", "read_matrix",
           "selected_plan"]


@dataclass(frozen=True)
class BuildRequest:
    """What `factory build` was asked, every path and value already checked."""

    matrix: Path
    out: Path
    cache: Path
    given: Given  # what the command line said of the settings pipeline/options.py settles
    locked: bool = False
    torch_pythons: tuple[Path, ...] = ()
    only: tuple[str, ...] = ()  # globs of cell ids
    new: str | None = None  # an index whose cells are left out (--new)
    select: tuple[Selection, ...] = ()  # --select: the cells a request names
    job: str | None = None  # one job of `factory plan`
    max_cells: int = 1  # cells per job, as `factory plan` was given
    shard: tuple[int, int] | None = None  # a deterministic slice of the cells
    import_objects: tuple[Path, ...] = ()
    object_cache_size: int = 0
    jobs: int | None = None  # compiler threads (None: this machine's CPUs)
    memory: int | None = None  # bytes the compilers may take (None: from what is free)
    cells: int = 1  # cells built at once
    time_limit: float | None = None
    unit_shard: tuple[int, int] | None = None
    export_objects: Path | None = None
    force: bool = False
    test: bool = False
    require_tests: bool = False  # with test: a wheel whose tests could not run is not published
    require_gpu: bool = False
    verify_objects: float = 0.0


@dataclass(frozen=True)
class BuildOutcome:
    plan: Plan
    results: list[CellResult]
    tested: list[CellTests]  # with --test: each built or kept cell's tests
    index: IndexSummary | None  # None when the run published nothing (a unit shard)
    status: int  # the exit status


def read_matrix(path: Path, given: Given, cache: Path,
                torch_pythons: tuple[Path, ...] = ()) -> tuple[Matrix, Options]:
    """The command's matrix, read once, and the run's options settled from the command line,
    the matrix and the environment before anything is fetched."""
    matrix = load_matrix(path, list(torch_pythons))
    return matrix, settle(given, cache, matrix, os.environ)


def selected_plan(request: BuildRequest, matrix: Matrix, voice: Voice) -> Plan:
    """The plan of the request's matrix, narrowed to its job, shard and --only globs."""
    sliced = bool(request.job or request.shard)
    plan = plan_matrix(matrix, request.cache, voice.warn, request.given.offline,
                       request.locked, every_platform=sliced)
    plan = new_cells(select_cells(plan, list(request.select)), request.new, voice.note)
    if request.job:
        plan = select_job(plan, request.job, request.max_cells).on_host(host_platform())
    elif request.shard:
        plan = select_shard(plan, *request.shard).on_host(host_platform())
    return only_cells(plan, request.only)


def only_cells(plan: Plan, patterns: tuple[str, ...]) -> Plan:
    """The plan's cells whose ids match one of `--only`'s globs (all without any)."""
    if not patterns:
        return plan
    selected = plan.only(list(patterns))
    if not selected.cells and not selected.skipped:
        ids = ", ".join([c.id for c in plan.cells] + [s.id for s in plan.skipped])
        raise ConfigError(f"{' '.join(patterns)!r} matches no cell (cells: {ids})",
                          key="--only")
    return selected


def choose(options: Options, plan: Plan, voice: Voice) -> tuple[PlacedPlan, Runners]:
    """The plan with each cell placed (plan/placement.py) where a runner of this run can take
    it, docker asked first where a placement depends on it, and the runners of its
    placements, not yet entered; where the cells go and why is noted."""
    engine = Engine() if needs_containers(plan, options.runner) else None
    places = places_for(engine, plan, options.runner, options.builder_base, options.offline)
    placed = place(plan, places)
    voice.note(placed.why)
    here = [cell for cell in placed.cells if cell.placement and TAKES[cell.placement][0] == "local"]
    if options.build.unconfined and here:
        voice.warn("--unconfined: the code of others that runs on this machine (a setup.py "
                   "build, a kernel's import gate and tests) runs outside the sandbox, with "
                   "your rights, your files and your network")
    return placed, runners_for(placed, options.cache, options.build, options.builder_base,
                               engine)


def build_matrix(request: BuildRequest, voice: Voice) -> BuildOutcome:
    matrix, options = read_matrix(request.matrix, request.given, request.cache,
                                  request.torch_pythons)
    plan, runners = choose(options, selected_plan(request, matrix, voice), voice)
    key = object_cache_key(options.object_key)
    _take_in(request, options.objects, key, voice)
    budget = machine_budget(request.jobs, request.memory)
    store = remote_store(*options.object_store, voice.warn) if options.object_store else None
    voice.note(f"compilers: {budget.describe()} for {request.cells} cell(s) at once; object "
               f"cache {options.objects}"
               + (f", behind it the object store {store.description}" if store else ""))
    settings = RunSettings(key=key, cells=request.cells, budget=budget, objects=options.objects,
                           object_cache_limit=request.object_cache_size,
                           time_limit=request.time_limit, unit_shard=request.unit_shard,
                           export_objects=request.export_objects, force=request.force,
                           test=request.test, require_tests=request.require_tests,
                           require_gpu=request.require_gpu,
                           verify_objects=request.verify_objects,
                           published=published_names(request.out),
                           max_wheel_size=options.max_wheel_size, object_store=store)
    tested: list[CellTests] = []
    with runners:
        results = run_build(plan, request.out, runners, voice.reporter, settings)
        if request.test and request.unit_shard is None:
            results, tested = _test_kept(plan, request.out, runners, results, voice,
                                         request.require_tests)
            voice.tested(tested, request.require_gpu)
    if store is not None:
        voice.note(f"object store {store.description}: {store.taken} object(s) taken, "
                   f"{store.given} given" + ("" if store.up else " (then it failed: see above)"))
    failed = int(any(result.status in ("failed", "untested") for result in results))
    if request.unit_shard is not None:  # objects only: nothing to publish
        return BuildOutcome(plan, results, tested, None, failed)
    published = {r.published.filename: r.published for r in results
                 if r.published is not None}
    if plan.matrix.variants:  # of this build's wheels, and of those built before it
        layout = Layout(request.out)
        known = load_manifest(layout.manifest).files
        published |= make_variants(layout.files, {
            **known, **{name: file_record(wheel, 0) for name, wheel in published.items()}})
    summary = update_index(request.out, force=request.force,
                           outcomes=cell_outcomes(plan, results), published=published,
                           journal_key=key)
    status = failed or status_of_tests(tested, request.require_gpu) or int(bool(summary.problems))
    return BuildOutcome(plan, results, tested, summary, status)


def _take_in(request: BuildRequest, objects: Path, key: bytes, voice: Voice) -> None:
    """The objects (and unit costs) of each --import-objects folder, into the object cache."""
    cached = ObjectCache(objects, key, request.object_cache_size)
    for folder in request.import_objects:
        taken, refused = cached.merge(folder)
        costs = CostBook(objects / COSTS_FOLDER).merge(folder / COSTS_FOLDER)
        voice.note(f"objects: took in {taken} from {folder}"
                   + (f", refused {refused} that failed their check" if refused else "")
                   + (f"; {costs} unit cost(s) for the cost book" if costs else ""))


def _test_kept(plan: PlacedPlan, out: Path, runners: Runners, results: list[CellResult],
               voice: Voice, require_tests: bool) -> tuple[list[CellResult], list[CellTests]]:
    """Built wheels were tested before they were published; a kept one never tested is tested
    now. The results with those reports, and every cell's tests as shown."""
    untested = {r.cell_id for r in results if r.status == "unchanged" and not r.tested}
    tested = test_cells(replace(plan, cells=tuple(c for c in plan.cells if c.id in untested)),
                        out, runners, voice.note, require_tests)
    reports = {entry.cell_id: entry.report for entry in tested}
    results = [replace(r, tested=reports.get(r.cell_id, r.tested)) for r in results]
    cells = {cell.id: cell for cell in plan.cells}
    shown = [CellTests(r.cell_id, r.wheel, r.tested, r.detail, r.log or out,
                       requires_tests(cells[r.cell_id], require_tests))
             for r in results if r.status in ("built", "untested")]
    return results, shown + tested
