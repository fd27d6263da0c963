"""Runners build cells where plan/placement.py placed them: on this machine (local.py: host,
cross-compiled and CPU cells), in the factory's builder container (docker/runner.py) or in a
container of the image that holds a cell's torch (docker/torch_image.py). Each registers the
placements it takes (TAKES); `places_for` tells the planner which of them this run has. Each
is a context manager that owns what it starts (containers, their processes) and stops all of
it when the run ends, fails or is interrupted; `Runners` holds those of one plan and sends
each cell to its own."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import ExitStack
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from ...config.model import RunnerChoice
from ...plan.model import Cell, Placement, Plan
from ...plan.placement import PlacedPlan, Places, candidates
from ...prove.load import LoadReport
from ...prove.tests import TestReport
from ...system.engine import Engine
from ...system.process import Log
from ..job import Built, Compiling
from ..options import BuildOptions
from .docker.image import builder_image
from .docker.runner import DockerRunner, missing_base
from .docker.torch_image import ImageRunner
from .local import LocalRunner

__all__ = ["TAKES", "Runner", "Runners", "places_for", "runners_for"]


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


class Runners:
    """The runners of a plan's placements, entered and left together: each cell goes to the
    runner of its placement (plan/placement.py)."""

    def __init__(self, by_placement: Mapping[Placement, Runner]) -> None:
        self._by = dict(by_placement)
        self._stack = ExitStack()

    def of(self, cell: Cell) -> Runner:
        assert cell.placement is not None, cell.id  # the runners build a PlacedPlan's cells
        return self._by[cell.placement]

    @property
    def options(self) -> BuildOptions:
        """The options every runner builds with (they are the same)."""
        return next(iter(self._by.values())).options

    def __enter__(self) -> Runners:
        for runner in dict.fromkeys(self._by.values()):  # each once, in placement order
            self._stack.enter_context(runner)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._stack.__exit__(kind, error, trace)


# The runner that takes each placement, and whether it needs the container engine: a runner
# of a new kind (a remote machine, a Kubernetes job) is one more entry here and in _make.
TAKES: dict[Placement, tuple[str, bool]] = {
    "host": ("local", False), "cross": ("local", False), "cpu": ("local", False),
    "builder": ("docker", True), "image": ("image", True)}


def places_for(engine: Engine | None, plan: Plan, requested: RunnerChoice, base: str,
               offline: bool) -> Places:
    """The places this run has: every placement whose runner can work now. With the engine
    asked (`engine`), the placements of the runners that need it are closed where docker
    cannot be used (with why), and what it answered is said: its version, the containers of
    an interrupted run it removed. The builder images the plan's cells would need must be
    there or buildable (not asked with --runner local)."""
    if engine is None:
        return Places(requested)
    problem = engine.unavailable()
    if problem is None and requested != "local":
        problem = _missing_image(engine, plan, requested, base, offline)
    if problem is not None:
        return Places(requested, {placement: problem for placement, (_, needs) in TAKES.items()
                                  if needs})
    said = f"docker {engine.server_version()} answers"
    orphans = engine.remove_orphans()
    if orphans:
        said += f"; removed {len(orphans)} container(s) an interrupted run left"
    return Places(requested, {}, said)


def runners_for(plan: PlacedPlan, cache: Path, options: BuildOptions, base: str,
                engine: Engine | None) -> Runners:
    """A runner for each placement of the plan's cells (one engine for those with containers);
    this machine's always."""
    made: dict[str, Runner] = {}
    placements = {cell.placement for cell in plan.cells if cell.placement is not None}
    by: dict[Placement, Runner] = {}
    for placement, (name, needs) in TAKES.items():
        if name == "local" or placement in placements:
            if needs:
                engine = engine or Engine()
            if name not in made:
                made[name] = _make(name, cache, options, base, engine)
            by[placement] = made[name]
    return Runners(by)


def _make(name: str, cache: Path, options: BuildOptions, base: str,
          engine: Engine | None) -> Runner:
    if name == "local":
        return LocalRunner(cache, options)
    assert engine is not None  # TAKES says these need it
    return DockerRunner(cache, options, base, engine) if name == "docker" else \
        ImageRunner(cache, options, engine)


def _missing_image(engine: Engine, plan: Plan, requested: RunnerChoice, base: str,
                   offline: bool) -> str | None:
    """Why some builder image the plan's cells would be built in can neither be found nor
    built, or None."""
    images = {builder_image(cell.cuda.version, cell.platform, base) for cell in plan.cells
              if cell.cuda is not None and "builder" in candidates(cell, requested)}
    for image in sorted(images, key=lambda image: image.name):
        if not engine.has_image(image.name):
            failure = missing_base(engine, image, offline)
            if failure is not None:
                return failure
    return None
