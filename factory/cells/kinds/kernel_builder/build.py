"""The kernel-builder project builder: a repo with build.toml, csrc/ and torch-ext/, its Python
package copied from torch-ext/ and its sources compiled into one abi3 shared object (a CUDA
cell, a stable-ABI one or a CPU one). A pure-Python repo's builder (kinds/noarch) takes its
package and its wheel's last step from here.

Compiling goes through the object cache (compile/objects.py): a unit whose object is there is
not compiled again, and each object compiled is kept there as soon as it is made, so a build
that is stopped resumes where it stopped. The gates judge the wheel afterwards, once, on the
host (checks.py).
"""

from __future__ import annotations

import math
import random
import shutil
import threading
from collections import deque
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .... import defaults
from ....compile.commands import (
    CompileJob,
    compile_jobs,
    extension_suffix,
    link_command,
    python_tags,
)
from ....compile.deps import unprovided
from ....compile.generated import REGISTRATION_HEADER, ops_module
from ....compile.objects import names_namespace, unit_identity
from ....compile.pool import TimeLimitReached
from ....errors import BuildError, CommandFailed
from ....plan.costs import UnitCost, cost_key, estimated_seconds, unit_memory
from ....plan.model import Cell
from ....system.process import Log, run
from ....toolchain import Toolchain
from ....wheel.assemble import CoreMetadata, compressed_tag, write_wheel
from ....wheel.read import PROVENANCE_FILE
from ....wheel.repair import repair
from ...broker import holdings_of
from ...compilers import log_changes, rule_note
from ...jit import check_jit_headers, ship_jit_headers
from ...job import (
    Built,
    Job,
    build_facts,
    cell_guard,
    cell_toolchain,
    compilers_of,
    stage_source,
    unpack_wheel,
)
from ...options import BuildOptions
from ...records import kernel_metadata, provenance_file

__all__ = ["build", "copy_package", "final_wheel", "kernel_core_metadata"]

PYTHON_FILES = ("py", "pyi")


def build(job: Job) -> Built:
    """A kernel-builder repo: its Python package from torch-ext/, its sources compiled into
    one abi3 shared object."""
    src, package = copy_package(job)
    return _build_extension(job, src, package)


def copy_package(job: Job) -> tuple[Path, Path]:
    """The repo staged in the cell's folder, and its Python package from torch-ext/ copied
    where the wheel is made from: (the staged repo, the package's folder)."""
    cell, work = job.cell, job.work
    src = work / "src"
    stage_source(cell.spec.root, src)
    package = work / "pkg" / cell.spec.python_name
    _copy_package(cell, src, package)
    return src, package


def _build_extension(job: Job, src: Path, package: Path) -> Built:
    cell, log, work, options = job.cell, job.log, job.work, job.options
    toolchain = cell_toolchain(job)
    for unit in cell.units:
        missing = unprovided(unit.depends)
        if missing:
            log.write(f"note: {unit.source} depends on {', '.join(missing)}, which the factory "
                      "does not provide; it compiles with the include folders build.toml names")
    for section, why in cell.widened.items():
        log.write(f"note: [kernel.{section}] selects no SM of the cell; it is {why}")
    _write_generated(cell, options, src, package)
    own_headers = ship_jit_headers(cell, package, log)

    jobs = compile_jobs(cell, toolchain, work)
    only = job.compiling.only
    if only is not None:
        jobs = [compile_job for compile_job in jobs if compile_job.source in only]
    for compile_job in jobs:
        compile_job.object.parent.mkdir(parents=True, exist_ok=True)
    if job.container is not None:
        job.container.hand_over(work)
    changes = [change for compile_job in jobs for change in compile_job.changes]
    applied = log_changes(log, changes, "build.toml's flags")
    try:
        compiled, cached = _compile_all(job, jobs, toolchain)
    except CommandFailed as failure:
        raise rule_note(failure, changes, cell) from None
    if only is not None:
        log.write(f"\nthis shard's {len(jobs)} unit(s) are in the object cache; the cell is "
                  "linked by the build that takes every shard's objects")
        return Built(None, len(jobs), compiled, cached)

    if own_headers:
        job.progress("run-time compiler gate")
        check_jit_headers(cell, toolchain, package, own_headers, log,
                          job.compiling.pool.budget.share(job.compiling.cells).cores)
    job.progress("linking")
    shared_object = package / f"{cell.ops_namespace}{extension_suffix(cell)}"
    argv, cwd = toolchain.runs_in.argv(link_command([j.object for j in jobs], shared_object,
                                                    toolchain), work)
    run(argv, log, timeout=defaults.STEP_TIMEOUT, cwd=cwd, what="linking")

    job.progress("auditwheel")
    metadata = _metadata(cell)
    draft = write_wheel(work / "pkg", work / "draft", metadata,
                        f"{python_tags(cell)}-linux_{cell.platform}", purelib=False,
                        epoch=options.epoch(cell))
    log.step("auditwheel repair")
    repaired = repair(draft, work / "wheelhouse", log)
    content = work / "final"
    unpack_wheel(repaired, content)
    job.progress("packaging")
    wheel = final_wheel(cell, options, content, compressed_tag(repaired.name),
                        build_facts(toolchain, work, applied), work / "dist", metadata)
    return Built(wheel, len(jobs), compiled, cached)


def final_wheel(cell: Cell, options: BuildOptions, content: Path, tag: str,
                facts: dict[str, str], dist: Path, metadata: CoreMetadata,
                purelib: bool = False) -> Path:
    """The published form: the package with its metadata.json, the wheel with provenance."""
    package = content / cell.spec.python_name
    (package / "metadata.json").write_bytes(kernel_metadata(cell, package))
    return write_wheel(content, dist, metadata, tag,
                       purelib=purelib,
                       epoch=options.epoch(cell),
                       extra_dist_info={PROVENANCE_FILE: provenance_file(cell, options, facts,
                                                                         content)})


def _copy_package(cell: Cell, src: Path, package: Path) -> None:
    """The Python package from torch-ext/<name>: its .py/.pyi files and the data files the
    build.toml's pyext names. A committed _ops.py is left behind; the generated one wins."""
    section = cell.spec.torch or cell.spec.noarch
    extensions = set(PYTHON_FILES) | set(section.pyext if section else ())
    origin = src / "torch-ext" / cell.spec.python_name
    for path in sorted(origin.rglob("*")):
        relative = path.relative_to(origin)
        if not path.is_file() or "__pycache__" in relative.parts:
            continue
        if relative.as_posix() == "_ops.py" or path.suffix.lstrip(".") not in extensions:
            continue
        destination = package / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, destination)


def _write_generated(cell: Cell, options: BuildOptions, src: Path, package: Path) -> None:
    """registration.h beside the bindings (over any committed copy) and the package's _ops.py."""
    assert cell.torch is not None  # a compiled cell
    folders = {src / "torch-ext"}
    bindings = cell.spec.torch.src if cell.spec.torch else ()
    folders |= {(src / source).parent for source in bindings}
    for folder in folders:
        (folder / "registration.h").write_text(REGISTRATION_HEADER)
    (package / "_ops.py").write_text(ops_module(cell.ops_namespace, cell_guard(cell, options)))


def _compile_all(job: Job, jobs: list[CompileJob], toolchain: Toolchain) -> tuple[int, int]:
    """Every unit's object, from the object cache or compiled (the longest first, as many at
    once as the budget allows); (compiled, from the cache). When a unit fails, the compilers
    running finish (their objects are kept) and no other starts."""
    log, compiling = job.log, job.compiling
    identities, todo, checked = _from_cache(job, jobs, toolchain)
    cached = len(jobs) - len(todo)
    log.step(f"compiling {len(todo)} of {len(jobs)} unit(s), {cached} from the object cache "
             f"(budget: {compiling.pool.budget.describe()})")
    run = _CompileRun(job, toolchain, identities, todo, cached)
    run.run()
    timed_out = [exc for exc in run.failures if isinstance(exc, TimeLimitReached)]
    kept = len(run.done) + cached if compiling.store is not None else 0
    if run.failures and len(timed_out) < len(run.failures):
        _say_kept(log, kept, len(jobs))
        raise next(exc for exc in run.failures if not isinstance(exc, TimeLimitReached))
    if run.late or timed_out:
        _say_kept(log, kept, len(jobs))
        killed = sum(1 for exc in timed_out if isinstance(exc, StoppedAtLimit))
        raise TimeLimitReached(_time_limit_summary(kept, len(jobs), run.late,
                                                   len(todo) - len(run.done) - killed,
                                                   run.discarded, log))
    _compare_checked(job, [j for j in jobs if j.source in checked])
    return len(run.done), cached


def _from_cache(job: Job, jobs: list[CompileJob],
                toolchain: Toolchain) -> tuple[dict[str, str], list[CompileJob], set[str]]:
    """Each unit's object taken from the object cache where it has one: (the units'
    identities, the units left to compile, the cached ones to compile again and compare)."""
    log, store, work = job.log, job.compiling.store, job.work
    identities: dict[str, str] = {}
    sealed = _sealed_image(job.cell)
    if store is not None:
        compilers = compilers_of(toolchain, work) + (f"\nimage {sealed}" if sealed else "")
        identities = {compile_job.source: unit_identity(compile_job.argv, compilers,
                                                        job.cell.ops_namespace, toolchain.cxx)
                      for compile_job in jobs}
    todo = []
    fetched: dict[str, bool] = {}  # source -> its object came from another machine
    for compile_job in jobs:
        key = store.fetch(identities[compile_job.source], work, job.cell.ops_namespace,
                          compile_job.object, log.write, sealed=bool(sealed)) \
            if store is not None else None
        if key is not None and store is not None:
            log.write(f"   {compile_job.source}: from the object cache")
            fetched[compile_job.source] = store.imported(key)
        else:
            todo.append(compile_job)
    checked = _to_check(fetched, job.compiling.verify)
    if checked:
        log.write(f"   compiling {len(checked)} of them again to compare bytes: "
                  f"{', '.join(sorted(checked))}")
        for compile_job in jobs:
            if compile_job.source in checked:
                compile_job.object.replace(_cached_copy(compile_job.object))
                todo.append(compile_job)
    return identities, todo, checked


class _CompileRun:
    """The units left to compile, the longest first, by as many workers as the budget has
    cores; what each ended as: compiled (`done`), not started because its estimate ends past
    the time limit (`late`), or failed (`failures`; `discarded` the core-seconds of compilers
    stopped at the limit)."""

    def __init__(self, job: Job, toolchain: Toolchain, identities: dict[str, str],
                 todo: list[CompileJob], cached: int) -> None:
        self.job, self.toolchain, self.identities, self.cached = job, toolchain, identities, cached
        self.known = dict(job.compiling.costs)  # what earlier builds measured, and this one
        self.total = len(todo)
        self.queue = deque(sorted(todo, key=lambda item: (
            -estimated_seconds(job.cell, item.unit, self.known), item.source)))
        self.lock = threading.Lock()
        self.done: list[str] = []
        self.late: list[tuple[str, float]] = []
        self.discarded: list[float] = []
        self.failures: list[BaseException] = []

    def run(self) -> None:
        pool = self.job.compiling.pool
        self._say()
        pool.queue(self.total)
        try:
            workers = min(self.total, pool.budget.cores)
            if workers:
                with ThreadPoolExecutor(max_workers=workers) as threads:
                    for _ in range(workers):
                        threads.submit(self._worker)
        finally:
            pool.withdraw(len(self.queue))

    def _say(self) -> None:
        self.job.progress(f"compiling {len(self.done)}/{self.total}"
                          + (f" ({self.cached} cached)" if self.cached else ""))

    def _worker(self) -> None:
        cell = self.job.cell
        while True:
            with self.lock:
                if self.failures or not self.queue:
                    return
                compile_job = self.queue.popleft()
                costs = dict(self.known)  # as measured so far: other workers add to `known`
            try:
                outcome = _compile_one(self.job, compile_job, self.toolchain,
                                       self.identities.get(compile_job.source), costs)
            except BaseException as exc:
                with self.lock:
                    if isinstance(exc, TimeLimitReached):
                        self.discarded.append(exc.seconds if isinstance(exc, StoppedAtLimit)
                                              else 0.0)
                    self.failures.append(exc)
                return
            with self.lock:
                if outcome is None:
                    self.late.append((compile_job.source, estimated_seconds(
                        cell, compile_job.unit, costs, slowest=True)))
                    continue
                self.known[cost_key(cell, compile_job.unit)] = outcome
                self.done.append(compile_job.source)
                self._say()


def _to_check(fetched: Mapping[str, bool], share: float) -> set[str]:
    """The units taken from the object cache to compile again and compare: `share` of them
    (--verify-objects), and at least VERIFY_IMPORTED of those imported from another machine
    (at least one). Chosen at random, so that a poisoned entry cannot count on being left."""
    chooser = random.SystemRandom()
    imported = sorted(source for source, other in fetched.items() if other)
    chosen = set(chooser.sample(imported, min(len(imported), max(
        1, math.ceil(defaults.VERIFY_IMPORTED * len(imported)))))) if imported else set()
    if share > 0:
        every = sorted(fetched)
        chosen |= set(chooser.sample(every, min(len(every), math.ceil(share * len(every)))))
    return chosen


def _cached_copy(obj: Path) -> Path:
    return obj.with_name(obj.name + ".cached")


def _compare_checked(job: Job, checked: list[CompileJob]) -> None:
    """Fail the cell when a unit compiled again differs from the object the cache gave: the
    build is reproducible, so the cached object was not made from these inputs (the fresh
    object has replaced it in the cache by now)."""
    for compile_job in checked:
        cached = _cached_copy(compile_job.object)
        same = cached.read_bytes() == compile_job.object.read_bytes()
        cached.unlink()
        if not same:
            job.log.write(f"   {compile_job.source}: the object cache's object differs from the "
                          "one compiled again")
            raise BuildError(f"{compile_job.source}: the object cache gave an object that "
                             "differs from the one compiled again from the same inputs (a "
                             "tampered entry, or an import made elsewhere); nothing is "
                             "published, the entry is replaced: check where the cache and its "
                             "imports come from, then build again")
        job.log.write(f"   {compile_job.source}: compiled again, the same bytes as the object "
                      "cache's")


class StoppedAtLimit(TimeLimitReached):
    """A compiler stopped when the time limit's grace ran out: the work it had done is lost."""

    def __init__(self, message: str, seconds: float) -> None:
        super().__init__(message)
        self.seconds = seconds  # core-seconds discarded


def _say_kept(log: Log, kept: int, total: int) -> None:
    if kept:
        log.write(f"\n{kept} of {total} unit(s) are in the object cache: the next build of this "
                  "cell compiles only the others")


def _time_limit_summary(kept: int, total: int, late: list[tuple[str, float]], unstarted: int,
                        discarded: list[float], log: Log) -> str:
    """What the time limit left undone: the units not started (`late` of them because their
    estimate ended after it, the others because it had passed), and the work of compilers
    stopped at it (lost)."""
    for source, estimate in sorted(late):
        log.write(f"   {source}: not started, its estimate ({estimate / 60:.1f} core-minutes) "
                  "ends after the time limit")
    lost = sum(discarded)
    log.write(f"   unit-minutes discarded at the time limit: {lost / 60:.1f}")
    return (f"stopped at the time limit with {kept} of {total} unit(s) in the object cache "
            f"({unstarted} not started, {len(late)} of them because their estimates end "
            f"after the limit; "
            f"{lost / 60:.1f} unit-minutes discarded); the next build compiles only the others")


def _compile_one(job: Job, compile_job: CompileJob, toolchain: Toolchain,
                 identity: str | None, costs: Mapping[str, UnitCost]) -> UnitCost | None:
    """Compile one unit and keep its object; what it cost, or None when it was not started
    because it may not end before the time limit (its slowest estimate, from `costs`: earlier
    builds' measurements and this build's so far, which also give its memory)."""
    compiling, cell, log = job.compiling, job.cell, job.log
    estimate = estimated_seconds(cell, compile_job.unit, costs, slowest=True)
    with compiling.pool.admitted(
            compile_job.threads_useful,
            lambda threads: unit_memory(cell, compile_job.unit, threads, costs),
            estimated_seconds(cell, compile_job.unit, costs)) as grant:
        if not compiling.pool.fits(estimate / grant.threads):
            return None
        argv, cwd = toolchain.runs_in.argv(compile_job.command(grant.threads), compile_job.cwd)
        try:
            finished = compiling.pool.run(argv, cwd, log, f"compiling {compile_job.source}",
                                          measure=not toolchain.runs_in.prefix)
        except TimeLimitReached as exc:
            if exc.ran is not None:
                _keep_lower_bound(job, compile_job, costs, exc.ran * grant.threads)
            raise StoppedAtLimit(str(exc), (exc.ran or 0.0) * grant.threads) from None
    archs = compile_job.threads_useful
    cost = UnitCost(finished.seconds * grant.threads, finished.peak, archs)
    compiling.measured(cost_key(cell, compile_job.unit), cost)
    kept = ""
    store = compiling.store
    if store is not None and identity is not None:
        try:
            store.put(identity, compile_job.source, job.work, compile_job.object,
                      compile_job.depfile, compile_job.cwd, cell.ops_namespace,
                      names_namespace(compile_job.argv, cell.ops_namespace),
                      sealed=bool(_sealed_image(cell)), cell=holdings_of(cell))
            kept = ", kept in the object cache"
        except OSError as exc:
            kept = f", not kept in the object cache ({exc})"
    peak = f", peak {finished.peak / 2**30:.2f} GiB" if finished.peak else ""
    log.write(f"   {compile_job.source}: compiled in {finished.seconds:.1f} s with "
              f"{grant.threads} thread(s){peak}{kept}")
    return cost


def _keep_lower_bound(job: Job, compile_job: CompileJob, costs: Mapping[str, UnitCost],
                      seconds: float) -> None:
    """A compiler stopped at the time limit after `seconds` (core-seconds): the cost book keeps
    that the unit takes longer, so that a later build with as little time does not start it
    to lose the same work (a measurement or bound above it stays)."""
    key = cost_key(job.cell, compile_job.unit)
    known = costs.get(key)
    if known is None or known.seconds < seconds:
        job.compiling.measured(key, UnitCost(seconds, None, compile_job.threads_useful,
                                             at_least=True))
    job.log.write(f"   {compile_job.source}: stopped at the time limit after {seconds:.0f} "
                  "core-seconds; the cost book keeps that it takes longer")


def _sealed_image(cell: Cell) -> str | None:
    """The image whose toolchain compiles the cell from outside it (its files are fixed by
    its id, and this process cannot read them), or None."""
    return cell.installed.image_id if cell.installed and cell.installed.image else None


def _metadata(cell: Cell) -> CoreMetadata:
    spec, cuda = cell.spec, cell.cuda
    assert cell.torch is not None
    if cuda is None:
        summary = (f"{spec.name} kernel for torch {cell.torch_shown} on the CPU, built by "
                   "kernel-wheel-factory")
        requires = (f"torch{cell.torch_pin}", *spec.requirements("cpu"))
    else:
        sms = " ".join(str(sm.base) for sm in cell.sms)
        torch = f"{cell.torch_shown} or newer (stable ABI)" if cell.stable_abi else \
            cell.torch_shown
        summary = (f"{spec.name} kernel for torch {torch} and CUDA "
                   f"{cuda.version} (SM {sms}), built by kernel-wheel-factory")
        requires = (f"torch{cell.torch_pin}", *spec.requirements("cuda"))
    return kernel_core_metadata(cell, summary, requires)


def kernel_core_metadata(cell: Cell, summary: str, requires: tuple[str, ...]) -> CoreMetadata:
    """A kernel-builder wheel's core metadata: its summary, requirements and the repo's
    README.md as its description."""
    readme = cell.spec.root / "README.md"
    return CoreMetadata(
        name=cell.distribution, version=cell.wheel_version, summary=summary,
        requires_python=">=3.9",
        requires=tuple(dict.fromkeys(requires)), license=cell.spec.license,
        readme=readme.read_text(encoding="utf-8", errors="replace") if readme.is_file() else None,
    )
