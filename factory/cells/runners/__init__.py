"""Runners decide where a cell is built: on this machine (local.py) or in a builder container
(docker/). Each is a context manager that owns what it starts (containers, their processes)
and stops all of it when the run ends, fails or is interrupted. `auto` takes docker when it can
be used, and says why."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from ...config.model import RunnerChoice
from ...errors import ConfigError
from ...plan.model import Cell, Plan
from ...prove.load import LoadReport
from ...prove.tests import TestReport
from ...system.engine import Engine
from ...system.process import Log
from ..job import Built, Compiling
from ..options import BuildOptions
from .docker.image import builder_image
from .docker.runner import DockerRunner, missing_base
from .local import LocalRunner

__all__ = ["Runner", "choose_runner"]


class Runner(Protocol):
    name: str
    options: BuildOptions

    def facts(self, cell: Cell) -> dict[str, Any]:
        """What the runner's environment adds to a cell's fingerprint."""

    def build(self, cell: Cell, staging: Path, log: Log, compiling: Compiling,
              progress: Callable[[str], None]) -> Built:
        """Build the cell (its wheel left in `staging`), or a shard's objects."""

    def load(self, cell: Cell, wheel: Path, modules: list[str], log: Log) -> LoadReport:
        """Import `modules` of the cell's wheel with the cell's torch, where it was built."""

    def test(self, cell: Cell, wheel: Path, log: Log) -> TestReport:
        """Run the kernel's own tests against the cell's wheel, where it was built."""

    def __enter__(self) -> Runner: ...

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        """Stop whatever still runs for the build."""


def choose_runner(requested: RunnerChoice, plan: Plan, cache: Path, options: BuildOptions,
                  base: str) -> tuple[Runner, str]:
    """The runner for a plan (not yet entered), and why it was chosen. Cells whose torch lives
    in an image need the docker runner; cells whose torch is an interpreter of this machine are
    built on this machine by either runner."""
    in_images = [cell for cell in plan.cells if cell.installed and cell.installed.image]
    crossed = [cell for cell in plan.cells if cell.cross]
    cpu = [cell for cell in plan.cells if cell.backend == "cpu"]
    if crossed or cpu:
        # the builder images are CUDA toolkits of one platform, with no cross compiler or
        # emulator
        what = (f"{crossed[0].id} is cross-compiled (cross: true)" if crossed
                else f"{cpu[0].id} is a CPU cell")
        if requested == "docker" or in_images:
            raise ConfigError(f"{what}, which only the local runner builds: build it with "
                              "--runner local (or auto)", key="runner")
        return LocalRunner(cache, options), (
            f"{crossed[0].platform} cells are cross-compiled on this machine" if crossed
            else "CPU cells are built on this machine")
    if requested == "local":
        if in_images:
            installed = in_images[0].installed
            assert installed is not None
            raise ConfigError(f"{installed.describe()} lives in an image: build it with the "
                              "docker runner (--runner docker or auto)", key="runner")
        return LocalRunner(cache, options), "asked for"
    if requested == "auto" and not in_images and not _builder_cells(plan) and \
            any(cell.installed for cell in plan.cells):
        return LocalRunner(cache, options), "every cell's torch is installed on this machine"
    engine = Engine()
    problem = engine.unavailable()
    if problem is None:
        problem = _missing_image(engine, plan, base, options.offline)
    if problem is None:
        why = f"docker {engine.server_version()} answers"
        orphans = engine.remove_orphans()
        if orphans:
            why += f"; removed {len(orphans)} container(s) an interrupted run left"
        return DockerRunner(cache, options, base, engine), why
    if requested == "docker" or in_images:
        raise ConfigError(f"the docker runner cannot be used: {problem}", key="runner")
    return LocalRunner(cache, options), (f"{problem}; so everything runs on this machine, "
                                         "outside containers: a setup.py project's build under "
                                         "bubblewrap, kernels' own tests with no file system "
                                         "sandbox (--runner docker keeps both in one)")


def _builder_cells(plan: Plan) -> list[Cell]:
    """The cells built in the factory's builder images (their torch comes from an index)."""
    return [cell for cell in plan.cells if cell.cuda is not None and cell.installed is None]


def _missing_image(engine: Engine, plan: Plan, base: str, offline: bool) -> str | None:
    """Why some builder image of the plan can neither be found nor built, or None."""
    images = {builder_image(cell.cuda.version, cell.platform, base)
              for cell in _builder_cells(plan) if cell.cuda is not None}
    for image in sorted(images, key=lambda image: image.name):
        if not engine.has_image(image.name):
            failure = missing_base(engine, image, offline)
            if failure is not None:
                return failure
    return None
