"""`factory wheelhouse`: from a request to a folder holding the wheels every test environment
of a matrix needs (prove/wheelhouse.py), for machines with no network."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..cells.kinds import kind_of
from ..config.matrix import load_matrix
from ..config.wheelhouse import wheelhouse_problem, wheelhouse_wheels
from ..errors import BuildError
from ..prove.testenv import requirement_sources
from ..prove.wheelhouse import Target, Wheelhouse, download, resolve, torch_closure
from ..toolchain.torch import torch_requirement
from .load import resolve_matrix
from .options import wheelhouse_targets

__all__ = ["WheelhouseRequest", "make_wheelhouse"]


@dataclass(frozen=True)
class WheelhouseRequest:
    """What `factory wheelhouse` was asked, every path and value already checked."""

    matrix: Path
    folder: Path  # the wheelhouse, made when missing; wheels already there are kept
    cache: Path
    pythons: tuple[str, ...] = ()  # the target's CPythons (): the matrix's, else this one's
    platforms: tuple[str, ...] = ()  # (): the matrix's
    glibc: str = "2.28"
    installed: tuple[tuple[str, str], ...] = ()  # what the target has: (name, version)
    locked: bool = False


def make_wheelhouse(request: WheelhouseRequest, say: Callable[[str], None]) -> Wheelhouse:
    matrix, kernels = resolve_matrix(load_matrix(request.matrix, filling=True), request.cache,
                                     say, locked=request.locked, filling=True)
    pythons, platforms = wheelhouse_targets(request.pythons, request.platforms, matrix)
    pins = dict(request.installed)
    targets = list(dict.fromkeys(
        Target(python, platform, request.glibc, torch_requirement(entry.release),
               cuda.torch_index)
        for entry in matrix.torch if not entry.index_only for cuda in matrix.cuda
        for platform in platforms for python in pythons))
    with_torch: set[str] = set()
    present: set[str] = set()
    request.folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kwf-wheelhouse-") as scratch:
        for number, target in enumerate(targets):
            work = Path(scratch) / str(number)
            closure = torch_closure(target, request.cache, work)
            wanted: dict[str, str] = {}
            for kernel in kernels:
                spec = kernel.spec
                needed = requirement_sources(
                    f"{spec.name}'s wheel (Requires-Dist)",
                    kind_of(spec).wheel_requirements(spec), spec.test_requires,
                    kernel.entry.tests)
                for name, version in resolve(target, needed, pins, request.cache,
                                             work / spec.name).items():
                    if name in closure:
                        with_torch.add(name)
                    elif pins.get(name) == version:
                        present.add(name)
                    else:
                        wanted[name] = version
            say(f"{target.describe()}: {len(wanted)} wheel(s) to fetch"
                + (f": {', '.join(sorted(wanted))}" if wanted else ""))
            download(target, wanted, request.folder, work)
    wheels = tuple(wheelhouse_wheels(request.folder))
    problem = wheelhouse_problem(request.folder) if wheels else None
    if problem is not None:
        raise BuildError(f"the wheelhouse {request.folder} {problem}")
    return Wheelhouse(wheels, tuple(sorted(with_torch)), tuple(sorted(present)))
