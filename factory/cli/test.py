"""`factory test MATRIX`: run each kernel's own tests against the wheel built for each cell,
and record the outcome for the index's browse page."""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

from rich.console import Console

from .. import defaults
from ..config.model import RUNNERS
from ..outputs.layout import refuse_links
from .common import (
    cache_dir,
    matrix_options,
    matrix_runner,
    only_cells,
    path_argument,
    say_to,
    test_options,
    test_table,
    writable_folder,
)

__all__ = ["add", "run"]


def add(commands: Any) -> None:
    test = commands.add_parser(
        "test", help="run the kernels' own tests against their built wheels",
        description="For each cell of MATRIX whose wheel is published in --out, install the "
                    "wheel with its requirements and pytest into a fresh environment beside "
                    "the cell's torch and run the kernel's tests/ folder there, where the "
                    "cell was built. Tests that need a GPU run where one is present and are "
                    "reported as skipped otherwise. The counts are recorded for the browse "
                    "page. Exit status 1 when a cell's tests fail or cannot run.")
    matrix_options(test, help="the matrix.yaml whose cells were built")
    test.add_argument("--out", type=path_argument, default=defaults.OUT,
                      help=f"the output folder the wheels were built into (default: "
                           f"{defaults.OUT})")
    test.add_argument("--only", action="append", metavar="PATTERN", default=[],
                      help="test only cells whose id matches this glob (repeatable)")
    test_options(test)
    test.add_argument("--build-root", type=path_argument, default=defaults.BUILD_ROOT,
                      metavar="DIR", help="where the test environments are made "
                                          f"(default: {defaults.BUILD_ROOT})")
    test.add_argument("--runner", choices=RUNNERS, default=None,
                      help="where the tests run (default: as `factory build` chooses)")


def run(args: argparse.Namespace, console: Console) -> int:
    from ..cells.options import BuildOptions, source_date_epoch, usable_build_root
    from ..cells.run import test_cells
    from ..index.records import load_manifest
    from ..index.update import update_index
    from ..outputs.layout import Layout
    from ..plan.load import plan_matrix

    out = writable_folder(args.out, "--out", must_exist=True)
    refuse_links(out)
    cache = cache_dir(args)
    plan = plan_matrix(args.matrix, cache, say_to(console, "yellow"), args.offline,
                       args.locked, torch_pythons=args.torch_python)
    plan = only_cells(plan, args.only)
    options = BuildOptions(usable_build_root(args.build_root), source_date_epoch(),
                           offline=args.offline)
    runner = matrix_runner(args, plan, cache, options, console)
    with runner:
        tested = test_cells(plan, out, runner, say_to(console))
    status = test_table(console, tested, args.require_gpu)
    layout = Layout(out)
    if layout.manifest.is_file():
        recorded = load_manifest(layout.manifest).cells
        outcomes = [replace(recorded[entry.cell_id], tests=entry.report.to_json())
                    for entry in tested if entry.report is not None and
                    entry.cell_id in recorded and recorded[entry.cell_id].wheel == entry.wheel]
        if outcomes:
            update_index(out, outcomes=outcomes, published={})  # indexes no stray file
    return status
