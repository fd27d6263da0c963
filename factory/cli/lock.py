"""`factory lock MATRIX`: pin every kernel source in the lock file beside the matrix."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from ..outputs.layout import writable_folder
from ..ui.console import say_to
from .common import cache_dir, matrix_options

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
    from ..pipeline.lock import lock_matrix, lock_target

    writable_folder(lock_target(args.matrix).parent, "lock file")
    outcome = lock_matrix(args.matrix, cache_dir(args), say_to(console, "yellow"), args.offline,
                          args.upgrade)
    for line in outcome.pinned:
        console.print(line, markup=False, soft_wrap=True)
    console.print(f"{'wrote' if outcome.changed else 'unchanged:'} {outcome.path}",
                  markup=False, soft_wrap=True)
    return 0
