"""The `factory` command. Errors are caught here, once: bad input exits 2 with one line, a failed
build exits 1, and nothing is written before all input has been validated."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from rich.console import Console

from . import __version__
from .build import run_build
from .cache import default_cache_dir
from .errors import ConfigError, FactoryError
from .matrix.load import host_platform, load_matrix
from .matrix.plan import Kernel, Plan, make_plan
from .progress import make_reporter
from .runner import LocalRunner
from .source import resolve_path_source
from .spec.buildtoml import read_build_toml


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad argument is one line and exit status 2 (not a usage dump)."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"{message} (see '{self.prog} --help')")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def make_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="factory", description="Build kernel-builder kernel repos into "
                     "pip-installable wheels for every torch x CUDA x SM cell of a matrix.")
    parser.add_argument("--version", action="version", version=f"kernel-wheel-factory {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    build = commands.add_parser("build", help="build the wheels of a matrix.yaml",
                                description="Build every cell of MATRIX into <out>/files.")
    build.add_argument("matrix", type=Path, metavar="MATRIX", help="the matrix.yaml to build")
    build.add_argument("--out", type=Path, default=Path("index"),
                       help="output folder (default: index)")
    build.add_argument("--only", action="append", metavar="PATTERN", default=[],
                       help="build only cells whose id matches this glob, e.g. "
                            "'img2gray/*torch211*' (repeatable)")
    build.add_argument("--jobs", type=_positive, default=1, metavar="N",
                       help="cells built at once (default 1; each uses the cores left)")
    build.add_argument("--cache-dir", type=Path, default=None, metavar="DIR",
                       help="toolkits, torch environments and build trees "
                            "(default: ~/.cache/kernel-wheel-factory)")
    build.add_argument("--force", action="store_true",
                       help="replace a published wheel whose bytes changed")
    return parser


def plan_matrix(matrix_path: Path, console: Console) -> Plan:
    """Validate the matrix and every kernel it names, and expand it into cells."""
    matrix = load_matrix(matrix_path)
    kernels = []
    for entry in matrix.kernels:
        spec = read_build_toml(entry.path)
        for warning in spec.warnings:
            console.print(f"warning: {warning}", style="yellow", markup=False)
        kernels.append(Kernel(entry, resolve_path_source(entry.path), spec))
    return make_plan(matrix, kernels, host_platform())


def _build(args: argparse.Namespace, console: Console) -> int:
    out: Path = args.out
    if out.exists() and not out.is_dir():
        raise ConfigError("exists and is not a folder", file=out, key="--out")
    plan = plan_matrix(args.matrix, console)
    if args.only:
        everything = plan
        plan = plan.only(args.only)
        if not plan.cells and not plan.skipped:
            ids = ", ".join([c.id for c in everything.cells] + [s.id for s in everything.skipped])
            raise ConfigError(f"{' '.join(args.only)!r} matches no cell (cells: {ids})",
                              key="--only")
    cache = args.cache_dir or default_cache_dir()
    results = run_build(plan, out, LocalRunner(cache.resolve()), args.jobs,
                        make_reporter(console), force=args.force)
    return 1 if any(result.status == "failed" for result in results) else 0


def _console(stderr: bool) -> Console:
    """Rich output; off a terminal (CI logs, pipes) wide enough that paths stay on one line."""
    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(stderr=stderr, highlight=False, width=160)
    return console


def main(argv: Sequence[str] | None = None) -> int:
    console = _console(stderr=False)
    errors = _console(stderr=True)
    try:
        args = make_parser().parse_args(argv)
        return _build(args, console)
    except FactoryError as exc:
        errors.print(f"error: {exc}", markup=False, soft_wrap=True)
        return exc.exit_status
    except KeyboardInterrupt:
        errors.print("interrupted")
        return 130


def entry_point() -> NoReturn:
    sys.exit(main())
