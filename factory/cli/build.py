"""`factory build MATRIX`: validate everything, build every cell (or one CI job's or shard's),
publish the wheels and bring the index up to date."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from .. import defaults
from ..config.model import RUNNERS, RunnerChoice
from ..errors import ConfigError
from ..layout import refuse_links
from .common import (
    cache_dir,
    matrix_options,
    path_argument,
    positive,
    print_index,
    say_to,
    shard,
    writable_folder,
)

__all__ = ["add", "run"]


def add(commands: Any) -> None:
    build = commands.add_parser("build", help="build the wheels of a matrix.yaml",
                                description="Build every cell of MATRIX into <out>/files.")
    matrix_options(build, help="the matrix.yaml to build")
    build.add_argument("--out", type=path_argument, default=defaults.OUT,
                       help=f"output folder (default: {defaults.OUT})")
    build.add_argument("--only", action="append", metavar="PATTERN", default=[],
                       help="build only cells whose id matches this glob, e.g. "
                            "'img2gray/*torch211*' (repeatable)")
    build.add_argument("--jobs", type=positive, default=defaults.JOBS, metavar="N",
                       help=f"cells built at once (default {defaults.JOBS}; each uses the "
                            "cores left)")
    build.add_argument("--force", action="store_true",
                       help="replace a published wheel whose bytes changed")
    build.add_argument("--build-root", type=path_argument, default=defaults.BUILD_ROOT,
                       metavar="DIR",
                       help="where cells are compiled; a fixed path keeps builds reproducible "
                            f"(default: {defaults.BUILD_ROOT})")
    slices = build.add_mutually_exclusive_group()
    slices.add_argument("--job", metavar="ID", default=None,
                        help="build one job of `factory plan` (e.g. cu130-x86_64-1)")
    slices.add_argument("--shard", type=shard, metavar="I/N", default=None,
                        help="build shard I of N (1/4 ... 4/4): a deterministic slice")
    build.add_argument("--max-cells", type=positive, default=defaults.MAX_CELLS_PER_JOB,
                       metavar="N", help="cells per job, as given to `factory plan` (default "
                                         f"{defaults.MAX_CELLS_PER_JOB})")
    build.add_argument("--runner", choices=RUNNERS, default=None,
                       help="where cells are built: on this machine (local), in builder "
                            "containers (docker), or docker when a daemon answers and the "
                            "images can be had, else local (auto, the default; the matrix's "
                            "runner: key sets it too)")


def run(args: argparse.Namespace, console: Console) -> int:
    from ..build.options import BuildOptions, source_date_epoch, usable_build_root
    from ..build.run import run_build
    from ..build.runners import choose_runner
    from ..index.records import cell_outcomes
    from ..index.update import update_index
    from ..plan.jobs import select_job, select_shard
    from ..plan.load import plan_matrix
    from ..ui.progress import make_reporter

    out = writable_folder(args.out, "--out")
    refuse_links(out)
    cache = cache_dir(args)
    sliced = bool(args.job or args.shard)
    plan = plan_matrix(args.matrix, cache, say_to(console, "yellow"), args.offline,
                       args.locked, every_platform=sliced, torch_pythons=args.torch_python)
    if args.job:
        plan = select_job(plan, args.job, args.max_cells).on_host(defaults.host_platform())
    elif args.shard:
        plan = select_shard(plan, *args.shard).on_host(defaults.host_platform())
    if args.only:
        everything = plan
        plan = plan.only(args.only)
        if not plan.cells and not plan.skipped:
            ids = ", ".join([c.id for c in everything.cells] + [s.id for s in everything.skipped])
            raise ConfigError(f"{' '.join(args.only)!r} matches no cell (cells: {ids})",
                              key="--only")
    options = BuildOptions(usable_build_root(args.build_root), source_date_epoch(),
                           offline=args.offline)
    requested: RunnerChoice = args.runner or plan.matrix.runner or defaults.RUNNER
    runner, why = choose_runner(requested, plan, cache, options, plan.matrix.docker_base)
    console.print(f"runner: {runner.name} ({why})", markup=False, soft_wrap=True)
    with runner:
        results = run_build(plan, out, runner, args.jobs, make_reporter(console),
                            force=args.force)
    summary = update_index(out, force=args.force, outcomes=cell_outcomes(plan, results),
                           published={r.published.filename: r.published for r in results
                                      if r.published is not None})
    problems = print_index(console, out, summary)
    return 1 if problems or any(result.status == "failed" for result in results) else 0
