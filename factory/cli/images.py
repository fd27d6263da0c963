"""`factory images MATRIX`: build the builder images a matrix needs, when missing."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rich.console import Console

from .. import defaults
from ..errors import ConfigError
from ..ui.console import say_to
from .common import cache_dir, matrix_options

__all__ = ["add", "run"]


def add(commands: Any) -> None:
    images = commands.add_parser(
        "images", help="build the builder images a matrix needs",
        description="Build (when missing) the docker builder image of every CUDA version and "
                    "platform of MATRIX, and print their names; the docker runner builds them "
                    "on first use too.")
    matrix_options(images, help="the matrix.yaml")


def run(args: argparse.Namespace, console: Console) -> int:
    from ..cells.options import BuildOptions
    from ..cells.runners.docker.runner import DockerRunner
    from ..pipeline.load import plan_matrix
    from ..system.engine import Engine
    from ..system.process import Log

    cache = cache_dir(args)
    plan = plan_matrix(args.matrix, cache, say_to(console, "yellow"), args.offline, args.locked,
                       torch_pythons=args.torch_python)
    engine = Engine()
    problem = engine.unavailable()
    if problem:
        raise ConfigError(f"cannot build images: {problem}", key="images")
    with DockerRunner(cache, BuildOptions(defaults.BUILD_ROOT, None), plan.matrix.docker_base,
                      engine) as runner:
        images = runner.make_images(plan.cells, Log(sys.stdout))
    if not images:
        console.print(f"no cell of {args.matrix} is compiled: no builder image is needed",
                      markup=False, soft_wrap=True)
    for image in images:
        console.print(f"image {image.name} (CUDA {image.cuda}, {image.platform}, base "
                      f"{image.base})", markup=False, soft_wrap=True)
    return 0
