"""`factory lock MATRIX`: pin every kernel source in the lock file beside the matrix."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from ..errors import ConfigError
from ..ui.console import say_to
from .common import cache_dir, matrix_options, writable_folder

__all__ = ["add", "run"]


def add(commands: Any) -> None:
    lock = commands.add_parser(
        "lock", help="pin every kernel source of a matrix in its lock file",
        description="Resolve every kernel source of MATRIX (git and Hub revs to commits, each "
                    "tree to its sha256, each wheel version) and every C++ dependency its "
                    "kernels name (a commit, or a wheel's or folder's sha256) and write them to "
                    "the lock file beside it (matrix.lock for matrix.yaml), with the torch "
                    "releases `torch: {latest: N}` stands for and the digest of each "
                    "wheelhouse's wheels; `factory build --locked` then builds exactly those, "
                    "and tests with exactly those wheels. The torch releases the lock already "
                    "pins are kept unless --upgrade is given.")
    matrix_options(lock, help="the matrix.yaml", lockable=False, plans=False)
    lock.add_argument("--upgrade", action="store_true",
                      help="take the index's newest torch releases for `torch: {latest: N}` "
                           "instead of the ones the lock pins")


def run(args: argparse.Namespace, console: Console) -> int:
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
    from ..config.wheelhouse import wheelhouse_digest, wheelhouse_wheels
    from ..pipeline.load import fetch_dependencies, resolve_matrix
    from ..plan.cells import check_unique_names

    target = lock_path(args.matrix)
    if target.exists() and not target.is_file():
        raise ConfigError("is in the way of the lock file: it is not a file; move it away",
                          file=target)
    writable_folder(target.parent, "lock file")
    matrix, kernels = resolve_matrix(args.matrix, cache_dir(args), say_to(console, "yellow"),
                                     args.offline, keep_torches=not args.upgrade)
    check_unique_names(matrix, kernels)
    entries = []
    for kernel in kernels:
        tree, source = kernel.source, kernel.entry.source
        entries.append(Locked(kernel.spec.name, source.kind, source.location, source.subdir,
                              source.revision, tree.revision, tree.digest, kernel.version))
        rev = f" {source.revision} ->" if source.revision else ""
        console.print(f"{kernel.spec.name} {kernel.version}: {source.kind}:{source.location}"
                      f"{' (' + source.subdir + ')' if source.subdir else ''}{rev} "
                      f"{tree.revision[:12]}", markup=False, soft_wrap=True)
    say = say_to(console, "yellow")
    dependencies = []
    for found in fetch_dependencies(matrix, kernels, cache_dir(args), args.offline, False,
                                    say).values():
        dependencies.append(LockedDependency(found.name, found.kind, found.location,
                                             found.requested, found.revision))
        console.print(f"{found.describe()}", markup=False, soft_wrap=True)
    torches = []
    latest = matrix.torch_latest
    for release in matrix.resolved if latest is not None else ():
        assert latest is not None
        torches.append(LockedTorch(str(release.release), release.version, str(release.cuda),
                                   latest.index, latest.pre, pythons=release.pythons))
        console.print(f"torch {release.release}: {release.version} (CUDA {release.cuda}) on "
                      f"{latest.index}", markup=False, soft_wrap=True)
    wheelhouses = []
    for folder in matrix.wheelhouses:
        wheelhouses.append(LockedWheelhouse(lock_location(folder, matrix.path),
                                            wheelhouse_digest(folder)))
        console.print(f"wheelhouse {wheelhouses[-1].location}: "
                      f"{len(wheelhouse_wheels(folder))} wheel(s), "
                      f"{wheelhouses[-1].digest[:12]}", markup=False, soft_wrap=True)
    path = lock_path(matrix.path)
    changed = write(path, render(matrix.path, entries, dependencies, torches, wheelhouses))
    console.print(f"{'wrote' if changed else 'unchanged:'} {path}", markup=False, soft_wrap=True)
    return 0
