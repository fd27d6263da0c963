"""From a matrix.yaml to a plan: every input validated and every kernel source fetched before
any cell is built, so bad input fails before work starts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .. import defaults
from ..cells.kinds import kind_of
from ..config import lockfile
from ..config.matrix.torches import with_resolved_torches
from ..config.model import DependencyEntry, KernelEntry, Matrix, ResolvedTorch
from ..config.project import project_kind, read_project
from ..errors import ConfigError, SourceError, SourceRefused
from ..plan.cells import dependency_names, make_plan, widened_notes
from ..plan.model import Kernel, Plan
from ..policy import dependency_release
from ..prove.tests import chosen_outside
from ..sources.depends import Dependency, DependencyFetcher
from ..sources.facts import read_facts
from ..sources.installed import read_torches
from ..sources.resolve import resolve_kernels
from ..sources.torches import newest_torches

__all__ = ["fetch_dependencies", "latest_torches", "plan_matrix", "resolve_matrix"]


def resolve_matrix(matrix: Matrix, cache: Path, say: Callable[[str], None],
                   offline: bool = False, locked: bool = False, filling: bool = False,
                   keep_torches: bool = False) -> tuple[Matrix, list[Kernel]]:
    """The matrix (as the command read it, once) and its kernels: each source fetched, each
    build.toml read (its warnings said). Installed torches are not read yet (plan_matrix reads
    them). `filling`: the matrix's wheelhouses are being filled. `keep_torches`: `torch:
    {latest: N}` keeps the releases the lock pins (what `factory lock` without --upgrade
    does)."""
    if locked and not filling:
        lockfile.check_wheelhouses(matrix)
    if matrix.torch_latest is not None:
        matrix = with_resolved_torches(
            matrix, latest_torches(matrix, offline, locked, say, keep_torches))
    kernels = []
    for found in resolve_kernels(matrix, cache, offline=offline, locked=locked, say=say):
        form = project_kind(found.tree.root, found.entry.kind)
        if form is None:
            wanted = "a build.toml or a setup.py / pyproject.toml" if found.entry.kind is None \
                else f"the files of a {found.entry.kind} project"
            raise ConfigError(f"{found.entry.source.describe()} has no {wanted}",
                              file=matrix.path, line=found.entry.line, key=found.entry.key)
        spec = read_project(found.tree.root, form)
        kind = kind_of(spec)
        if not found.entry.guard and not kind.guard_optional:
            raise ConfigError("a kernel-builder kernel's wheel always has its import guard; "
                              "guard: false is for PEP 517 projects", file=matrix.path,
                              line=found.entry.line, key=f"{found.entry.key}.guard")
        _check_test_paths(matrix, found.entry, spec.root / "tests")
        for warning in spec.warnings:
            say(f"warning: {warning}")
        assert found.version is not None  # resolve_kernels refuses a kernel without one
        kernels.append(Kernel(found.entry, found.tree, spec, found.version, read_facts(spec),
                              kind))
    return matrix, kernels


def _check_test_paths(matrix: Matrix, entry: KernelEntry, tests: Path) -> None:
    """The tests a kernel's entry chooses must lie in its tests/ folder, said before anything
    is built (pytest would only find nothing to run, after the build)."""
    path = chosen_outside(tests, entry.tests.paths)
    if path is None:
        return
    hint = ""
    if path.startswith("tests/") and chosen_outside(tests, [path[len("tests/"):]]) is None:
        hint = f": paths are relative to tests/, so write '{path[len('tests/'):]}'"
    raise ConfigError(f"'{path}' is not in the kernel's tests/ folder{hint}",
                      file=matrix.path, line=entry.line, key=f"{entry.key}.tests.paths")


def latest_torches(matrix: Matrix, offline: bool, locked: bool,
                   say: Callable[[str], None], keep: bool = False) -> list[ResolvedTorch]:
    """What `torch: {latest: N}` stands for: the lock's releases with --locked or --offline (and
    with `keep`, where the lock pins as many as the matrix asks for), else the index's newest
    (a lock that differs is noted)."""
    latest = matrix.torch_latest
    assert latest is not None
    path = lockfile.lock_path(matrix.path)
    pinned = []
    if path.is_file():
        try:
            pinned = [entry.resolved for entry in lockfile.read_torches(path)
                      if entry.index == latest.index and entry.pre == latest.pre]
        except ConfigError:
            if locked or offline:
                raise
    if locked or offline:
        if len(pinned) != latest.count:
            raise ConfigError(f"the lock pins no {latest.count} torch release(s) of "
                              f"{latest.index}; run `factory lock {matrix.path.name}`",
                              file=matrix.path, line=latest.line, key="torch.latest")
        return pinned
    if keep and len(pinned) == latest.count:
        say(f"torch: {path.name} pins {', '.join(entry.version for entry in pinned)}; "
            f"`factory lock {matrix.path.name} --upgrade` takes the index's newest")
        return pinned
    found = newest_torches(latest, say)
    if pinned and pinned != found:
        say(f"note: {path.name} pins torch {', '.join(entry.version for entry in pinned)}; "
            f"`factory lock {matrix.path.name} --upgrade` takes the index's newest")
    return found


def plan_matrix(matrix: Matrix, cache: Path, say: Callable[[str], None],
                offline: bool = False, locked: bool = False,
                every_platform: bool = False) -> Plan:
    """The matrix's cells; with `every_platform`, other platforms' cells too (a CI fan-out's
    plan), else those this machine cannot build are skipped."""
    matrix, kernels = resolve_matrix(matrix, cache, say, offline, locked)
    dependencies = fetch_dependencies(matrix, kernels, cache, offline, locked, say)
    matrix = read_torches(matrix, offline)
    plan = make_plan(matrix, kernels, None if every_platform else defaults.host_platform(),
                     dependencies)
    for note in widened_notes(plan):
        say(note)
    return plan


def fetch_dependencies(matrix: Matrix, kernels: list[Kernel], cache: Path,
                       offline: bool, locked: bool,
                       say: Callable[[str], None]) -> dict[str, Dependency]:
    """Every C++ dependency the kernels' CUDA sections (and, with CPU cells, CPU sections)
    name, fetched once. `locked` takes the lock's revisions and refuses one that changed;
    otherwise a lock that differs is noted."""
    backends = ("cuda", "cpu") if matrix.cpu is not None else ("cuda",)
    names = list(dict.fromkeys(name for kernel in kernels for backend in backends
                               for name in dependency_names(kernel.spec, None, backend)))
    for given in matrix.depends:
        if given.name not in names:
            say(f"note: {matrix.path.name} line {given.line}: depends.{given.name} is named by no "
                "kernel of the matrix")
    path = lockfile.lock_path(matrix.path)
    pins: dict[str, lockfile.LockedDependency] = {}
    if path.is_file():
        try:
            pins = lockfile.read_dependencies(path)
        except ConfigError:
            if locked:
                raise
            # A plain build only compares with the lock; the kernels' check has said why it
            # cannot be read.
    if locked:
        missing = [name for name in names if name not in pins]
        if missing:
            raise ConfigError(f"the lock pins no {missing[0]}; run `factory lock "
                              f"{matrix.path.name}`", file=path, key="dependency")
    fetcher = DependencyFetcher(cache, offline)
    found = {}
    for name in names:
        entry = matrix.dependency(name)
        pin = pins.get(name) if locked else None
        if pin is not None:
            _check_pin(pin, entry, matrix, path)
        try:
            dependency = fetcher.fetch(name, entry,
                                       pin.revision if pin and pin.kind == "git" else None)
        except SourceRefused as error:
            raise ConfigError(error.message, file=matrix.path,
                              line=entry.line if entry else None,
                              key=f"depends.{name}") from None
        except SourceError as error:
            raise SourceError(f"{matrix.path.name}: depends.{name}: {error}") from None
        known = pins.get(name)
        if pin is not None and dependency.revision != pin.revision:
            raise ConfigError(f"{dependency.describe()} is not what the lock pins "
                              f"({pin.revision[:12]}); run `factory lock {matrix.path.name}` "
                              "if the change is wanted", file=path, line=pin.line,
                              key="dependency.revision")
        if not locked and known is not None and known.revision != dependency.revision:
            say(f"note: {path.name} pins {name} at {known.revision[:12]}; building "
                f"{dependency.revision[:12]} (`--locked` builds the pinned one)")
        found[name] = dependency
    return found


def _check_pin(pin: lockfile.LockedDependency, entry: DependencyEntry | None, matrix: Matrix,
               path: Path) -> None:
    """The lock was written for the origin the matrix names now."""
    origin: tuple[str, str]
    if entry is not None:
        origin = (entry.kind, entry.location)
    else:
        release = dependency_release(pin.name)
        assert release is not None  # only names with a release are fetched
        origin = (release.default_origin, release.default_location)
    if origin == (pin.kind, pin.location):
        return
    raise ConfigError(f"depends.{pin.name} was locked from {pin.kind}:{pin.location}; the "
                      f"matrix now names another origin; run `factory lock {matrix.path.name}`",
                      file=path, line=pin.line, key="dependency")
