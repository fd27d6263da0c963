"""`factory build MATRIX`: validate everything, build every cell (or one CI job's or shard's),
publish the wheels and bring the index up to date."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console

from .. import defaults
from ..config.model import RUNNERS
from ..errors import ConfigError
from ..outputs.layout import refuse_links
from .common import (
    cache_dir,
    duration,
    fraction,
    index_url,
    matrix_options,
    matrix_runner,
    only_cells,
    path_argument,
    positive,
    print_index,
    print_served,
    say_to,
    shard,
    site_limit_option,
    size,
    size_limit,
    test_options,
    test_table,
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
    build.add_argument("--cells", type=positive, default=defaults.CELLS, metavar="N",
                       help=f"cells built at once (default {defaults.CELLS}); their compilers "
                            "share the cores and memory")
    build.add_argument("--jobs", type=positive, default=None, metavar="N",
                       help="compiler threads at once, over all cells (default: the CPUs this "
                            "process may use)")
    build.add_argument("--memory", type=size, default=None, metavar="SIZE",
                       help="memory the compilers may take, e.g. 12G (default: "
                            f"{defaults.MEMORY_HEADROOM * 100:.0f}%% of what is free when the "
                            "build starts)")
    build.add_argument("--time-limit", type=duration, default=None, metavar="DURATION",
                       help="stop compiling after this long, e.g. 5h30m: no unit starts "
                            "unless its estimated time ends before it, and compilers still "
                            "running then get a grace of 10%% of the limit (at most 20m) to "
                            "finish; what they finished stays in the object cache, so the "
                            "next build continues")
    build.add_argument("--max-wheel-size", type=size_limit, default=None, metavar="LIMIT",
                       help="fail a cell whose wheel is bigger: a size (100M, 2GiB) or pypi "
                            "(100 MiB) or github-release (2 GiB); default: the matrix's "
                            "max-wheel-size, else none")
    site_limit_option(build)
    build.add_argument("--object-cache", type=path_argument, default=None, metavar="DIR",
                       help="the object cache (default: objects/ in the cache folder)")
    build.add_argument("--object-cache-size", type=size, default=defaults.OBJECT_CACHE_LIMIT,
                       metavar="SIZE", help="the object cache's limit; the least recently used "
                                            f"objects go beyond it (default "
                                            f"{defaults.OBJECT_CACHE_LIMIT // 2**30}G)")
    build.add_argument("--unit-shard", type=shard, default=None, metavar="I/N",
                       help="compile shard I of N of each selected cell's units into the "
                            "object cache, and link nothing (the shard jobs of a cell "
                            "`factory plan --split-after` splits)")
    build.add_argument("--export-objects", type=path_argument, default=None, metavar="DIR",
                       help="copy the objects this run used or made into DIR, as an object "
                            "cache of its own (a shard job's artifact)")
    build.add_argument("--import-objects", type=path_argument, action="append", default=[],
                       metavar="DIR", help="take in the objects of DIR (exported by shard "
                                           "jobs; each is checked) before building "
                                           "(repeatable)")
    build.add_argument("--force", action="store_true",
                       help="replace a published wheel whose bytes changed")
    build.add_argument("--verify-objects", type=fraction, default=0.0, metavar="FRACTION",
                       help="compile this share (0 to 1) of the units taken from the object "
                            "cache again and fail the cell if the bytes differ (imported "
                            f"objects: at least {round(defaults.VERIFY_IMPORTED * 100)}%% "
                            "of them, and "
                            "one, always)")
    build.add_argument("--unconfined", action="store_true",
                       help="run a setup.py / pyproject project's build on this machine "
                            "without the bubblewrap sandbox (it then has your rights, files "
                            "and network; its environment stays allow-listed)")
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
    build.add_argument("--test", action="store_true",
                       help="run each kernel's own tests (its tests/ folder) against each "
                            "wheel before it is published, as `factory test` does: a cell "
                            "whose tests fail publishes nothing (a kept wheel never tested "
                            "is tested too)")
    test_options(build)
    build.add_argument("--base-url", type=index_url, default=None, metavar="URL",
                       help="the public URL the index will be served at: the import guard "
                            "of each wheel then names the full URL of the index that fits "
                            "the user's torch")
    build.add_argument("--runner", choices=RUNNERS, default=None,
                       help="where cells are built: on this machine (local), in builder "
                            "containers (docker), or docker when a daemon answers and the "
                            "images can be had, else local (auto, the default; the matrix's "
                            "runner: key sets it too)")


def run(args: argparse.Namespace, console: Console) -> int:
    from ..cells.options import BuildOptions, source_date_epoch, usable_build_root
    from ..cells.run import CellTests, RunSettings, run_build, test_cells
    from ..compile.objects import ObjectCache
    from ..compile.pool import machine_budget
    from ..index.records import cell_outcomes, published_names
    from ..index.update import update_index
    from ..plan.costs import COSTS_FOLDER, CostBook
    from ..plan.jobs import select_job, select_shard
    from ..plan.load import plan_matrix
    from ..ui.progress import make_reporter

    out = writable_folder(args.out, "--out")
    refuse_links(out)
    cache = cache_dir(args)
    objects = writable_folder(args.object_cache or cache / defaults.OBJECT_CACHE_FOLDER,
                              "--object-cache")
    imports = [_object_folder(folder) for folder in args.import_objects]
    export = writable_folder(args.export_objects, "--export-objects") \
        if args.export_objects else None
    sliced = bool(args.job or args.shard)
    plan = plan_matrix(args.matrix, cache, say_to(console, "yellow"), args.offline,
                       args.locked, every_platform=sliced, torch_pythons=args.torch_python)
    if args.job:
        plan = select_job(plan, args.job, args.max_cells).on_host(defaults.host_platform())
    elif args.shard:
        plan = select_shard(plan, *args.shard).on_host(defaults.host_platform())
    plan = only_cells(plan, args.only)
    options = BuildOptions(usable_build_root(args.build_root), source_date_epoch(),
                           offline=args.offline, index_url=args.base_url,
                           unconfined=args.unconfined)
    runner = matrix_runner(args, plan, cache, options, console)
    cached = ObjectCache(objects, args.object_cache_size)
    for folder in imports:
        taken, refused = cached.merge(folder)
        costs = CostBook(objects / COSTS_FOLDER).merge(folder / COSTS_FOLDER)
        console.print(f"objects: took in {taken} from {folder}"
                      + (f", refused {refused} that failed their check" if refused else "")
                      + (f"; {costs} unit cost(s) for the cost book" if costs else ""),
                      markup=False, soft_wrap=True)
    budget = machine_budget(args.jobs, args.memory)
    console.print(f"compilers: {budget.describe()} for {args.cells} cell(s) at once; object "
                  f"cache {objects}", markup=False, soft_wrap=True)
    settings = RunSettings(cells=args.cells, budget=budget, objects=objects,
                           object_cache_limit=args.object_cache_size,
                           time_limit=args.time_limit, unit_shard=args.unit_shard,
                           export_objects=export, force=args.force, test=args.test,
                           require_gpu=args.require_gpu, verify_objects=args.verify_objects,
                           published=published_names(out),
                           max_wheel_size=args.max_wheel_size or plan.matrix.max_wheel_size)
    tests_failed = 0
    with runner:
        results = run_build(plan, out, runner, make_reporter(console), settings)
        if args.test and args.unit_shard is None:
            # Built wheels were tested before they were published; a kept one never tested
            # is tested now.
            untested = {r.cell_id for r in results if r.status == "unchanged" and not r.tested}
            tested = test_cells(replace(plan, cells=tuple(c for c in plan.cells
                                                          if c.id in untested)),
                                out, runner, say_to(console))
            reports = {entry.cell_id: entry.report for entry in tested}
            results = [replace(r, tested=reports.get(r.cell_id, r.tested)) for r in results]
            shown = [CellTests(r.cell_id, r.wheel, r.tested,
                               None if r.tested else "the kernel has no tests/ folder",
                               r.log or out, no_tests=r.tested is None)
                     for r in results if r.status == "built"]
            tests_failed = test_table(console, shown + tested, args.require_gpu)
    if args.unit_shard is not None:  # objects only: nothing to publish
        return 1 if any(result.status == "failed" for result in results) else 0
    print_served(console, plan, results)
    summary = update_index(out, force=args.force, outcomes=cell_outcomes(plan, results),
                           published={r.published.filename: r.published for r in results
                                      if r.published is not None})
    problems = print_index(console, out, summary, args.site_limit)
    failed = any(result.status == "failed" for result in results)
    return 1 if problems or failed or tests_failed else 0


def _object_folder(path: Path) -> Path:
    """An --import-objects folder: an object cache folder that exists."""
    if not path.is_dir():
        raise ConfigError("is not a folder (give a folder --export-objects wrote)", file=path,
                          key="--import-objects")
    if not (path / "objects").is_dir() and not (path / "docker").is_dir():
        raise ConfigError("holds no objects (give a folder --export-objects wrote)", file=path,
                          key="--import-objects")
    return path
