"""`factory build MATRIX`: validate everything, build every cell (or one CI job's or shard's),
publish the wheels and bring the index up to date."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console

from .. import defaults
from ..errors import ConfigError
from ..outputs.layout import refuse_links, writable_folder
from ..pipeline.arguments import RUNNERS
from .common import (
    cache_dir,
    duration,
    fraction,
    index_url,
    matrix_options,
    new_index,
    new_option,
    object_store,
    path_argument,
    positive,
    selections,
    shard,
    site_limit_option,
    size,
    size_limit,
    test_options,
    wheelhouses,
)

__all__ = ["add", "run"]


def add(commands: Any) -> None:
    build = commands.add_parser("build", help="build the wheels of a matrix.yaml",
                                description="Build every cell of MATRIX into <out>/files.")
    matrix_options(build, help="the matrix.yaml to build")
    new_option(build)
    build.add_argument("--out", type=path_argument, default=defaults.OUT,
                       help=f"output folder (default: {defaults.OUT})")
    build.add_argument("--only", action="append", metavar="PATTERN", default=[],
                       help="build only cells whose id matches this glob, e.g. "
                            "'img2gray/*torch211*' (repeatable)")
    _budget_options(build)
    build.add_argument("--max-wheel-size", type=size_limit, default=None, metavar="LIMIT",
                       help="fail a cell whose wheel is bigger: a size (100M, 2GiB) or pypi "
                            "(100 MiB) or github-release (2 GiB); default: the matrix's "
                            "max-wheel-size, else none")
    site_limit_option(build)
    _object_options(build)
    build.add_argument("--force", action="store_true",
                       help="replace a published wheel whose bytes changed")
    _verify_option(build)
    build.add_argument("--build-root", type=path_argument, default=None,
                       metavar="DIR",
                       help="where cells are compiled; a fixed path keeps builds reproducible "
                            f"(default: ${defaults.BUILD_ROOT_VARIABLE}, else "
                            f"{defaults.BUILD_ROOT})")
    _slice_options(build)
    build.add_argument("--test", action="store_true",
                       help="run each kernel's own tests (its tests/ folder) against each "
                            "wheel before it is published, as `factory test` does: a cell "
                            "whose tests fail publishes nothing, one whose tests could not "
                            "run is published as untested unless tests are required (a kept "
                            "wheel never tested is tested too)")
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


def _budget_options(build: Any) -> None:
    """How much of the machine a build takes, and for how long."""
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


def _object_options(build: Any) -> None:
    """The object cache, and the objects shard jobs hand on."""
    build.add_argument("--object-cache", type=path_argument, default=None, metavar="DIR",
                       help="the object cache (default: objects/ in the cache folder)")
    build.add_argument("--object-cache-size", type=size, default=defaults.OBJECT_CACHE_LIMIT,
                       metavar="SIZE", help="the object cache's limit; the least recently used "
                                            f"objects go beyond it (default "
                                            f"{defaults.OBJECT_CACHE_LIMIT // 2**30}G)")
    build.add_argument("--object-store", type=object_store, default=None, metavar="URL",
                       help="a remote object store shared by machines, behind the object "
                            "cache: s3://BUCKET/PREFIX (boto3's credentials) or "
                            "redis://HOST:PORT/DB (a password only in "
                            "$KERNEL_WHEEL_FACTORY_OBJECT_STORE); a store that fails costs a "
                            "warning, and its units are compiled here")
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


def _verify_option(build: Any) -> None:
    """Compiling cached objects again to compare them."""
    build.add_argument("--verify-objects", type=fraction, default=0.0, metavar="FRACTION",
                       help="compile this share (0 to 1) of the units taken from the object "
                            "cache again and fail the cell if the bytes differ (imported "
                            f"objects: at least {round(defaults.VERIFY_IMPORTED * 100)}%% "
                            "of them, and "
                            "one, always)")


def _slice_options(build: Any) -> None:
    """Building one slice of a matrix's cells."""
    slices = build.add_mutually_exclusive_group()
    slices.add_argument("--job", metavar="ID", default=None,
                        help="build one job of `factory plan` (e.g. cu130-x86_64-1)")
    slices.add_argument("--shard", type=shard, metavar="I/N", default=None,
                        help="build shard I of N (1/4 ... 4/4): a deterministic slice")
    build.add_argument("--max-cells", type=positive, default=defaults.MAX_CELLS_PER_JOB,
                       metavar="N", help="cells per job, as given to `factory plan` (default "
                                         f"{defaults.MAX_CELLS_PER_JOB})")


def run(args: argparse.Namespace, console: Console) -> int:
    from ..pipeline.build import BuildRequest, build_matrix
    from ..pipeline.options import Given
    from ..ui.outcomes import show_index, show_served
    from ..ui.voice import ConsoleVoice

    out = writable_folder(args.out, "--out")
    refuse_links(out)
    cache = cache_dir(args)
    given = Given(objects=args.object_cache, runner=args.runner,
                  max_wheel_size=args.max_wheel_size, wheelhouses=wheelhouses(args),
                  build_root=args.build_root, base_url=args.base_url,
                  unconfined=args.unconfined, offline=args.offline,
                  object_store=args.object_store)
    request = BuildRequest(
        matrix=args.matrix, out=out, cache=cache, given=given,
        locked=args.locked, torch_pythons=tuple(args.torch_python),
        only=tuple(args.only), new=new_index(args), select=selections(args), job=args.job,
        max_cells=args.max_cells, shard=args.shard,
        import_objects=tuple(_object_folder(folder) for folder in args.import_objects),
        object_cache_size=args.object_cache_size, jobs=args.jobs, memory=args.memory,
        cells=args.cells, time_limit=args.time_limit, unit_shard=args.unit_shard,
        export_objects=writable_folder(args.export_objects, "--export-objects")
        if args.export_objects else None,
        force=args.force, test=args.test or args.require_tests,
        require_tests=args.require_tests, require_gpu=args.require_gpu,
        verify_objects=args.verify_objects)
    outcome = build_matrix(request, ConsoleVoice(console))
    if outcome.index is not None:
        show_served(console, outcome.plan, outcome.results)
        show_index(console, out, outcome.index, args.site_limit)
    return outcome.status


def _object_folder(path: Path) -> Path:
    """An --import-objects folder: an object cache folder that exists."""
    if not path.is_dir():
        raise ConfigError("is not a folder (give a folder --export-objects wrote)", file=path,
                          key="--import-objects")
    if not (path / "objects").is_dir() and not (path / "docker").is_dir():
        raise ConfigError("holds no objects (give a folder --export-objects wrote)", file=path,
                          key="--import-objects")
    return path
