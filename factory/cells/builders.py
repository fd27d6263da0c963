"""Build one cell into one wheel, with the builder of its kind of project (kinds/: a
kernel-builder repo, a pure-Python one, a PEP 517 CUDA extension or a cuTile-Python project),
peers that share the kit of job.py.

Runs wherever a runner puts it (on the host, or inside a builder container for the docker
runner); it reads only the cell, the cache and the build options, and leaves the wheel in
`staging`.
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

from ..plan.model import Cell
from ..system.cache import exclusive
from ..system.process import Log
from .job import Built, Compiling, Container, Job, Progress
from .kinds import kind_of
from .options import BuildOptions

__all__ = ["build_cell"]


def build_cell(cell: Cell, cache: Path, options: BuildOptions, staging: Path, log: Log,
               compiling: Compiling, progress: Progress, prepared: bool = False,
               container: Container | None = None) -> Built:
    """Build the cell's wheel into `staging`. With `prepared`, the toolkit and torch
    environment must be in the cache already, which is only read. A cell whose torch lives in
    an image compiles in `container`, a container of that image that sees the cell's build
    folder at the same path."""
    work = options.build_root / cell.key
    with exclusive(work):
        _stop_leftover_compilers(work)
        if work.exists():
            shutil.rmtree(work)
        built = kind_of(cell.spec).build(
            Job(cell, cache, options, work, log, compiling, progress, prepared, container))
        if built.wheel is None:
            return built
        staging.mkdir(parents=True, exist_ok=True)
        staged = staging / built.wheel.name
        shutil.copyfile(built.wheel, staged)
    return Built(staged, built.units, built.compiled, built.cached)


def _stop_leftover_compilers(work: Path) -> None:
    """Compilers a killed build of this cell left running: stopped before the folder is made
    again, so that none of them writes into this build. Each compiler the factory starts leads
    a session of its own and names a file of the folder on its command line; nothing else is
    touched: a process of another mount namespace (a container's build, whose folder of the
    same name is another folder) is left alone."""
    folder = str(work).encode() + b"/"
    ours = os.readlink("/proc/self/ns/mnt")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            session = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[3])
            named = folder in (entry / "cmdline").read_bytes() and \
                os.readlink(entry / "ns" / "mnt") == ours
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile, or not ours to look at
        if session == int(entry.name) and named:
            try:
                os.killpg(session, signal.SIGKILL)
            except OSError:
                pass
