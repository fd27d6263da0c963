"""`factory plan MATRIX`: the matrix's cells as jobs for a CI fan-out, and (--split-after) the
unit shards of cells too long for one job."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from .. import defaults
from ..ui.console import make_console, say_to
from .common import (
    cache_dir,
    duration,
    matrix_options,
    new_index,
    new_option,
    object_store,
    path_argument,
    positive,
    selections,
)

__all__ = ["add", "run"]


def add(commands: Any) -> None:
    plan = commands.add_parser(
        "plan", help="split a matrix into jobs for a CI fan-out",
        description="Group the cells of MATRIX into jobs (one builder image each, at most "
                    "--max-cells cells) and print them: as JSON, or (--format github) as one "
                    "line a workflow's strategy.matrix takes. `factory build MATRIX --job ID` "
                    "builds one.")
    matrix_options(plan, help="the matrix.yaml")
    new_option(plan)
    plan.add_argument("--format", choices=("json", "github", "github-shards"), default="json",
                      help="json (everything), github (the jobs, as one strategy.matrix line) "
                           "or github-shards (the unit shard jobs, likewise)")
    plan.add_argument("--max-cells", type=positive, default=defaults.MAX_CELLS_PER_JOB,
                      metavar="N",
                      help=f"cells per job at most (default {defaults.MAX_CELLS_PER_JOB})")
    plan.add_argument("--split-after", type=duration, default=None, metavar="DURATION",
                      help="split a cell whose units are estimated to take longer than this "
                           "to compile (e.g. 4h) into unit shards, one job each")
    plan.add_argument("--cores", type=positive, default=defaults.RUNNER_CORES, metavar="N",
                      help="the cores of a build machine, for --split-after (default "
                           f"{defaults.RUNNER_CORES})")
    plan.add_argument("--object-cache", type=path_argument, default=None, metavar="DIR",
                      help="where earlier builds recorded what each unit cost, and which units' "
                           "objects it holds (default: "
                           "objects/ in the cache folder); units never built are estimated "
                           "from their size")
    plan.add_argument("--object-store", type=object_store, default=None, metavar="URL",
                      help="a remote object store shared by machines (s3:// or redis://): "
                           "the plan says which units it holds; default: the matrix's "
                           f"object-store:, else ${defaults.OBJECT_STORE_VARIABLE}")


def run(args: argparse.Namespace, console: Console) -> int:
    from ..pipeline.plan import PlanRequest, plan_fanout
    from ..ui.plan import fanout_text

    cache = cache_dir(args)
    request = PlanRequest(
        matrix=args.matrix, cache=cache,
        objects=args.object_cache,
        max_cells=args.max_cells, offline=args.offline, locked=args.locked,
        torch_pythons=tuple(args.torch_python), split_after=args.split_after, cores=args.cores,
        new=new_index(args), select=selections(args), object_store=args.object_store)
    fanout = plan_fanout(request, say_to(make_console(stderr=True), "yellow"))
    print(fanout_text(fanout, args.format))
    return 0
