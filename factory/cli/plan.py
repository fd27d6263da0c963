"""`factory plan MATRIX`: the matrix's cells as jobs for a CI fan-out."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.console import Console

from .. import defaults
from .common import cache_dir, make_console, matrix_options, positive, say_to

__all__ = ["add", "run"]


def add(commands: Any) -> None:
    plan = commands.add_parser(
        "plan", help="split a matrix into jobs for a CI fan-out",
        description="Group the cells of MATRIX into jobs (one builder image each, at most "
                    "--max-cells cells) and print them: as JSON, or (--format github) as one "
                    "line a workflow's strategy.matrix takes. `factory build MATRIX --job ID` "
                    "builds one.")
    matrix_options(plan, help="the matrix.yaml")
    plan.add_argument("--format", choices=("json", "github"), default="json")
    plan.add_argument("--max-cells", type=positive, default=defaults.MAX_CELLS_PER_JOB,
                      metavar="N",
                      help=f"cells per job at most (default {defaults.MAX_CELLS_PER_JOB})")


def run(args: argparse.Namespace, console: Console) -> int:
    from ..plan.jobs import plan_jobs
    from ..plan.load import plan_matrix

    plan = plan_matrix(args.matrix, cache_dir(args), say_to(make_console(stderr=True), "yellow"),
                       args.offline, args.locked, every_platform=True,
                       torch_pythons=args.torch_python)
    jobs = plan_jobs(plan, args.max_cells)
    if args.format == "github":
        text = json.dumps({"include": [job.summary() for job in jobs]}, separators=(",", ":"))
    else:
        text = json.dumps({"matrix": str(args.matrix), "max_cells": args.max_cells,
                           "jobs": [{**job.summary(), "cells": list(job.cells),
                                     "skipped": list(job.skipped)} for job in jobs]}, indent=1)
    print(text)
    return 0
