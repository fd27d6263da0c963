"""`factory images MATRIX`: the builder images of a matrix's compiled cells, made or found."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from ..cells.runners.docker.image import BuilderImage
from ..cells.runners.docker.runner import DockerRunner
from ..config.matrix import load_matrix
from ..errors import ConfigError
from ..plan.placement import candidates
from ..system.engine import Engine
from ..system.process import Log
from .load import plan_matrix
from .options import Given, settle

__all__ = ["BuilderImage", "make_builder_images"]


def make_builder_images(matrix: Path, cache: Path, say: Callable[[str], None], offline: bool,
                        locked: bool, torch_pythons: list[Path],
                        output: TextIO) -> list[BuilderImage]:
    """Every image a compiled cell of the matrix builds in, made where it is missing (the
    build's output streams to `output`); none when no cell is compiled."""
    loaded = load_matrix(matrix, torch_pythons)
    options = settle(Given(offline=offline), cache, loaded)
    plan = plan_matrix(loaded, cache, say, offline, locked)
    engine = Engine()
    problem = engine.unavailable()
    if problem:
        raise ConfigError(f"cannot build images: {problem}", key="images")
    with DockerRunner(cache, options.build, options.builder_base, engine) as runner:
        cells = [cell for cell in plan.cells if "builder" in candidates(cell, "auto")]
        return runner.make_images(cells, Log(output))
