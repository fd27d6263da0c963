"""`factory images MATRIX`: build the builder images a matrix needs, when missing."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rich.console import Console

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
    from ..pipeline.images import make_builder_images

    images = make_builder_images(args.matrix, cache_dir(args), say_to(console, "yellow"),
                                 args.offline, args.locked, args.torch_python, sys.stdout)
    if not images:
        console.print(f"no cell of {args.matrix} is compiled: no builder image is needed",
                      markup=False, soft_wrap=True)
    for image in images:
        console.print(f"image {image.name} (CUDA {image.cuda}, {image.platform}, base "
                      f"{image.base})", markup=False, soft_wrap=True)
    return 0
