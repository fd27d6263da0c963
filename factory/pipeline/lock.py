"""`factory lock MATRIX`: every source a matrix names pinned in matrix.lock beside it: each
kernel's commit and tree digest, each C++ dependency, the torch releases of `latest:` and the
wheelhouses' digests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..config.lockfile import (
    Locked,
    LockedDependency,
    LockedTorch,
    LockedWheelhouse,
    lock_location,
    lock_path,
    render,
    write,
)
from ..config.matrix import load_matrix
from ..config.model import Matrix
from ..config.wheelhouse import wheelhouse_digest, wheelhouse_wheels
from ..errors import ConfigError
from ..plan.cells import check_unique_names
from ..plan.model import Kernel
from .load import fetch_dependencies, resolve_matrix

__all__ = ["LockOutcome", "lock_matrix", "lock_target"]


@dataclass(frozen=True)
class LockOutcome:
    path: Path
    changed: bool  # the file was written (it held something else, or nothing)
    pinned: tuple[str, ...]  # a line for each source pinned


def lock_target(matrix: Path) -> Path:
    """Where the matrix's lock file goes; refused when something else is in the way."""
    target = lock_path(matrix)
    if target.exists() and not target.is_file():
        raise ConfigError("is in the way of the lock file: it is not a file; move it away",
                          file=target)
    return target


def lock_matrix(matrix_path: Path, cache: Path, say: Callable[[str], None], offline: bool,
                upgrade: bool) -> LockOutcome:
    """Fetch and pin every source of the matrix (`upgrade`: the newest torch releases of
    `latest:`, not the ones the lock pins) and write the lock file."""
    matrix, kernels = resolve_matrix(load_matrix(matrix_path), cache, say, offline,
                                     keep_torches=not upgrade)
    check_unique_names(matrix, kernels)
    pinned: list[str] = []
    entries = _kernels(kernels, pinned)
    dependencies = []
    for found in fetch_dependencies(matrix, kernels, cache, offline, False, say).values():
        dependencies.append(LockedDependency(found.name, found.kind, found.location,
                                             found.requested, found.revision))
        pinned.append(found.describe())
    torches = _torches(matrix, pinned)
    wheelhouses = []
    for folder in matrix.wheelhouses:
        wheelhouses.append(LockedWheelhouse(lock_location(folder, matrix.path),
                                            wheelhouse_digest(folder)))
        pinned.append(f"wheelhouse {wheelhouses[-1].location}: "
                      f"{len(wheelhouse_wheels(folder))} wheel(s), "
                      f"{wheelhouses[-1].digest[:12]}")
    path = lock_path(matrix.path)
    changed = write(path, render(matrix.path, entries, dependencies, torches, wheelhouses))
    return LockOutcome(path, changed, tuple(pinned))


def _kernels(kernels: list[Kernel], pinned: list[str]) -> list[Locked]:
    entries = []
    for kernel in kernels:
        tree, source = kernel.source, kernel.entry.source
        entries.append(Locked(kernel.spec.name, source.kind, source.location, source.subdir,
                              source.revision, tree.revision, tree.digest, kernel.version))
        rev = f" {source.revision} ->" if source.revision else ""
        pinned.append(f"{kernel.spec.name} {kernel.version}: {source.kind}:{source.location}"
                      f"{' (' + source.subdir + ')' if source.subdir else ''}{rev} "
                      f"{tree.revision[:12]}")
    return entries


def _torches(matrix: Matrix, pinned: list[str]) -> list[LockedTorch]:
    torches = []
    latest = matrix.torch_latest
    for release in matrix.resolved if latest is not None else ():
        assert latest is not None
        torches.append(LockedTorch(str(release.release), release.version, str(release.cuda),
                                   latest.index, latest.pre, pythons=release.pythons))
        pinned.append(f"torch {release.release}: {release.version} (CUDA {release.cuda}) on "
                      f"{latest.index}")
    return torches
