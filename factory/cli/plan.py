"""`factory plan MATRIX`: the matrix's cells as jobs for a CI fan-out, and (--split-after) the
unit shards of cells too long for one job."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.console import Console

from .. import defaults
from ..ui.console import make_console, say_to
from .common import cache_dir, duration, matrix_options, path_argument, positive

__all__ = ["add", "run"]


def add(commands: Any) -> None:
    plan = commands.add_parser(
        "plan", help="split a matrix into jobs for a CI fan-out",
        description="Group the cells of MATRIX into jobs (one builder image each, at most "
                    "--max-cells cells) and print them: as JSON, or (--format github) as one "
                    "line a workflow's strategy.matrix takes. `factory build MATRIX --job ID` "
                    "builds one.")
    matrix_options(plan, help="the matrix.yaml")
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
                      help="where earlier builds recorded what each unit cost (default: "
                           "objects/ in the cache folder); units never built are estimated "
                           "from their size")


def run(args: argparse.Namespace, console: Console) -> int:
    from ..plan.costs import COSTS_FOLDER, CostBook, cell_seconds, known_costs, shard_count
    from ..plan.jobs import plan_jobs, unit_shards
    from ..plan.load import plan_matrix

    cache = cache_dir(args)
    plan = plan_matrix(args.matrix, cache, say_to(make_console(stderr=True), "yellow"),
                       args.offline, args.locked, every_platform=True,
                       torch_pythons=args.torch_python)
    jobs = plan_jobs(plan, args.max_cells)
    books = (CostBook(plan.matrix.costs) if plan.matrix.costs else None,
             CostBook((args.object_cache or cache / defaults.OBJECT_CACHE_FOLDER) / COSTS_FOLDER))
    estimates: dict[str, float] = {}
    units: dict[str, int] = {}
    counts: dict[str, int] = {}
    widened: dict[str, dict[str, str]] = {}
    for cell in plan.cells:
        if cell.cuda is None:
            continue
        estimates[cell.id] = cell_seconds(cell, known_costs(cell.spec.name, books))
        units[cell.id] = sum(1 for unit in cell.units if unit.compiled)
        widened[cell.id] = cell.widened
        if args.split_after is not None:
            counts[cell.id] = shard_count(estimates[cell.id], args.split_after, args.cores,
                                          units[cell.id])
    shards = unit_shards(plan, jobs, counts)
    compact = (",", ":")
    if args.format == "github":
        text = json.dumps({"include": [
            {**job.summary(), "shards": sum(s.job == job for s in shards)} for job in jobs]},
            separators=compact)
    elif args.format == "github-shards":
        text = json.dumps({"include": [shard.summary() for shard in shards]},
                          separators=compact)
    else:
        text = json.dumps({
            "matrix": str(args.matrix), "max_cells": args.max_cells,
            "jobs": [{**job.summary(), "cells": list(job.cells), "skipped": list(job.skipped),
                      "split": {cell: counts[cell] for cell in job.cells
                                if counts.get(cell, 1) > 1}} for job in jobs],
            "shards": [shard.summary() for shard in shards],
            "served": {cell.id: [served.id for served in plan.serves(cell.id)]
                       for cell in plan.cells if plan.serves(cell.id)},
            "cells": {cell: {"units": units[cell], "core_seconds": round(estimates[cell], 1),
                             "shards": counts.get(cell, 1), "widened": widened[cell]}
                      for cell in sorted(estimates)},
            "skipped": {skipped.id: skipped.reason for skipped in plan.skipped},
            **({"estimates": {"split_after": args.split_after, "cores": args.cores,
                              "core_seconds": {cell: round(seconds, 1) for cell, seconds
                                               in sorted(estimates.items())}}}
               if args.split_after is not None else {}),
        }, indent=1)
    print(text)
    return 0
