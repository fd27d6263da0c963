"""`factory verify WHEEL`: build a wheel again from its provenance record and compare bytes.

The record names the source, the cell, the build folder and the source time; the same inputs
through the same toolchain must give the same sha256. When they do not, the report says which
files of the wheel differ and which recorded tool versions differ from this machine's.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..compile.pool import CompilePool, machine_budget
from ..config.model import KernelEntry, SourceRequest
from ..config.project import project_kind, read_project
from ..errors import ConfigError
from ..plan.codec import cell_from_record, recorded_kind
from ..sources.depends import DependencyFetcher
from ..sources.facts import read_facts
from ..sources.resolve import Sources
from ..sources.tree import GitState, SourceTree, resolve_path_source
from ..system.machine import Machine
from ..system.process import Log
from ..wheel.provenance import Provenance, ProvenanceError
from ..wheel.read import WheelFile, read_wheel
from ..wheel.variant import make_variant
from .builders import build_cell
from .job import Compiling
from .kinds import kind_of
from .options import BuildOptions

__all__ = ["Verdict", "verify_wheel"]


@dataclass(frozen=True)
class Verdict:
    wheel: Path
    rebuilt: Path | None
    expected_sha256: str
    actual_sha256: str | None
    problem: str | None  # why the wheel could not be rebuilt as recorded
    differing_files: tuple[str, ...] = ()
    differing_tools: tuple[str, ...] = ()
    log: Path | None = None
    builder: str | None = None  # the container image the wheel was built in, if any

    @property
    def matches(self) -> bool:
        return self.problem is None and self.expected_sha256 == self.actual_sha256


def _with_env_values(cell: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The recorded cell with its build variables' values, taken from this environment (the
    provenance names them with the sha256 of each value, never the value); or why not."""
    env = cell.get("env")
    if not isinstance(env, dict) or not env:
        return cell, None
    values = {}
    for name, recorded in sorted(env.items()):
        digest = recorded.get("sha256") if isinstance(recorded, dict) else None
        if digest is None:  # a record written before values were hashed
            values[name] = str(recorded)
            continue
        value = os.environ.get(name)
        if value is None or hashlib.sha256(value.encode()).hexdigest() != digest:
            said = "is not set here" if value is None else "has another value here"
            return cell, (f"the wheel was built with {name} set (its value's sha256 is "
                          f"{str(digest)[:12]}) and {name} {said}: set it as the build had it "
                          "to rebuild the wheel")
        values[name] = value
    return {**cell, "env": values}, None


def verify_wheel(wheel: Path, source: Path | None, cache: Path,
                 build_root: Callable[[Path], Path], machine: Machine) -> Verdict:
    """The verdict on `wheel` rebuilt from `source` (else where its provenance says), in the
    folder `build_root` settles from the one its provenance records."""
    report = read_wheel(wheel)
    if not report.provenance:
        raise ConfigError("has no provenance record (.dist-info/provenance.json): it was not "
                          "built by kernel-wheel-factory, so there is nothing to rebuild from",
                          file=wheel)
    try:
        record = Provenance.from_json(report.provenance)
    except ProvenanceError as exc:
        raise ConfigError(f"has a provenance record that cannot be rebuilt from: {exc}",
                          file=wheel) from None
    tree = _source_tree(record, source, wheel, cache)
    recorded_tree = record.source.tree_sha256
    if tree.digest != recorded_tree:
        return Verdict(wheel, None, report.sha256, None,
                       f"the source at {tree.root} is not the one the wheel was built from "
                       f"(its tree is {tree.digest[:12]}, the record's {recorded_tree[:12]})")
    version = record.kernel.version
    fetcher = DependencyFetcher(cache)
    cell_fields, missing = _with_env_values(dict(record.cell))
    if missing:
        return Verdict(wheel, None, report.sha256, None, missing)
    spec = read_project(tree.root, recorded_kind(cell_fields))
    cell = cell_from_record(cell_fields, spec, kind_of(spec), tree, version, read_facts(spec),
                            wheel, dependency=lambda item: fetcher.again(item, Path.cwd()))
    options = BuildOptions(build_root(Path(record.build.root)),
                           record.build.source_date_epoch, index_url=record.build.index_url,
                           machine=machine)
    work = cache / "verify" / cell.key
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    log_path = work / "verify.log"
    with open(log_path, "w", encoding="utf-8") as handle:
        # No object cache: the point is to compile every unit again.
        compiling = Compiling(CompilePool(machine_budget()), None, {}, lambda key, cost: None)
        built = build_cell(cell, cache, options, work, Log(handle), compiling,
                           progress=lambda step: None)
    assert built.wheel is not None  # a whole cell, not a shard
    rebuilt = built.wheel
    if report.variant is not None and report.label is not None:
        # a variant wheel is its cell's wheel re-issued: made again from the rebuilt one
        rebuilt = make_variant(rebuilt, rebuilt.parent, report.label, report.variant)
    actual = read_wheel(rebuilt)
    return Verdict(wheel, rebuilt, report.sha256, actual.sha256, None,
                   _differing_files(wheel, rebuilt) if actual.sha256 != report.sha256 else (),
                   _differing_tools(report, actual), log_path, record.build.builder)


def _source_tree(record: Provenance, source: Path | None, wheel: Path,
                 cache: Path) -> SourceTree:
    """The recorded source: fetched again by its commit (git, Hub), or found at --source or
    its recorded folder."""
    recorded = record.source
    kind, git = recorded.kind, recorded.git
    sources = Sources(cache)
    pinned = sources.fetcher(kind).pinned
    if source is None and pinned:
        if git is None:
            raise ConfigError(f"the wheel records a {kind} source without its commit", file=wheel)
        location = recorded.location
        folder = Path(location).resolve() if kind == "git" and Path(location).is_dir() else None
        request = SourceRequest(kind, location, recorded.revision, recorded.subdir, folder)
        entry = KernelEntry(request, record.kernel.version, None)
        return sources.resolve(entry, wheel, pin=git.commit, version=record.kernel.version).tree
    root = (source or Path(recorded.location)).resolve()
    if project_kind(root, recorded_kind(record.cell)) is None:
        raise ConfigError(f"the wheel's source '{recorded.location}' is not at {root}; pass "
                          "--source DIR", file=wheel, key="--source")
    found = resolve_path_source(root)
    # Where the source was and its git state are taken from the record: once the tree digest
    # matches, they are true of this copy too, and the rebuilt record must say the same.
    state = GitState(git.commit, git.dirty, record.build.source_date_epoch) if git else None
    revision = git.commit if pinned and git is not None else found.revision
    return SourceTree(found.root, revision, kind, recorded.location, found.newest_mtime, state,
                      found.digest, recorded.subdir, recorded.revision)


def _differing_files(first: Path, second: Path) -> tuple[str, ...]:
    def digests(path: Path) -> dict[str, str]:
        with zipfile.ZipFile(path) as archive:
            return {info.filename: hashlib.sha256(archive.read(info)).hexdigest()
                    + f"/{info.date_time}/{info.external_attr}"
                    for info in archive.infolist()}

    a, b = digests(first), digests(second)
    return tuple(sorted(name for name in a.keys() | b.keys() if a.get(name) != b.get(name)))


def _differing_tools(recorded: WheelFile, rebuilt: WheelFile) -> tuple[str, ...]:
    old = recorded.record.toolchain if recorded.record else {}
    new = rebuilt.record.toolchain if rebuilt.record else {}
    return tuple(f"{name}: {old.get(name)} then, {new.get(name)} now"
                 for name in sorted(old.keys() | new.keys()) if old.get(name) != new.get(name))
