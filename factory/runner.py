"""Runners decide where a cell is built: on this machine (local) or in a builder container
(docker, see container/runner.py). `auto` takes docker when it can be used, and says why."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from .cellbuild import build_cell
from .compile.commands import host_compiler
from .container.engine import Engine
from .container.image import builder_image
from .container.runner import DockerRunner, missing_base
from .errors import ConfigError
from .matrix.plan import Cell, Plan
from .process import Log, first_output_line
from .provenance import BuildOptions


class Runner(Protocol):
    name: str
    options: BuildOptions

    def facts(self, cell: Cell) -> dict:
        """What the runner's environment adds to a cell's fingerprint."""

    def build(self, cell: Cell, staging: Path, log: Log, threads: int,
              progress: Callable[[str], None]) -> Path:
        """Build the cell; return its wheel, left in `staging`."""

    def close(self) -> None:
        """Stop whatever still runs for the build; called once, when the run ends."""


class LocalRunner:
    """Builds on the host, with toolkits and torch environments from the factory's cache."""

    name = "local"

    def __init__(self, cache: Path, options: BuildOptions) -> None:
        self.cache = cache
        self.options = options
        self._facts: dict | None = None

    def facts(self, cell: Cell) -> dict:
        """The host facts a build depends on: the Python the environments are made with, the
        host compiler, and the variables the toolchain reads."""
        if self._facts is None:
            compiler = host_compiler()
            self._facts = {
                "python": f"{sys.version_info[0]}.{sys.version_info[1]}",
                "cxx": [compiler, first_output_line([compiler, "-dumpfullversion"])],
                "env": {name: os.environ.get(name) for name in ("SOURCE_DATE_EPOCH", "CUDA_HOME")},
            }
        return self._facts

    def build(self, cell: Cell, staging: Path, log: Log, threads: int,
              progress: Callable[[str], None]) -> Path:
        return build_cell(cell, self.cache, self.options, staging, log, threads, progress)

    def close(self) -> None:
        pass


def choose_runner(requested: str, plan: Plan, cache: Path, options: BuildOptions,
                  base: str | None) -> tuple[Runner, str]:
    """The runner for a plan, and why it was chosen."""
    if requested == "local":
        return LocalRunner(cache, options), "asked for"
    engine = Engine()
    problem = engine.unavailable()
    if problem is None:
        problem = _missing_image(engine, plan, base)
    if problem is None:
        orphans = engine.remove_orphans()
        why = f"docker {engine.server_version()} answers"
        if orphans:
            why += f"; removed {len(orphans)} container(s) an interrupted run left"
        return DockerRunner(cache, options, base, engine), why
    if requested == "docker":
        raise ConfigError(f"the docker runner cannot be used: {problem}", key="runner")
    return LocalRunner(cache, options), problem


def _missing_image(engine: Engine, plan: Plan, base: str | None) -> str | None:
    """Why some builder image of the plan can neither be found nor built, or None."""
    images = {builder_image(cell.cuda.version, cell.platform, base)
              for cell in plan.cells if cell.cuda is not None}
    for image in sorted(images, key=lambda image: image.name):
        if not engine.has_image(image.name):
            failure = missing_base(engine, image)
            if failure is not None:
                return failure
    return None
