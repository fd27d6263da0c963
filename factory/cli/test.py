"""`factory test MATRIX`: run each kernel's own tests against the wheel built for each cell,
and record the outcome for the index's browse page."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from .. import defaults
from ..outputs.layout import refuse_links, writable_folder
from ..pipeline.arguments import RUNNERS
from .common import (
    cache_dir,
    matrix_options,
    path_argument,
    test_options,
    wheelhouses,
)

__all__ = ["add", "run"]


def add(commands: Any) -> None:
    test = commands.add_parser(
        "test", help="run the kernels' own tests against their built wheels",
        description="For each cell of MATRIX whose wheel is published in --out, install the "
                    "wheel with its requirements and pytest into a fresh environment beside "
                    "the cell's torch and run the kernel's tests/ folder there, where the "
                    "cell was built. Tests that need a GPU run where one is present and are "
                    "reported as skipped otherwise. Each cell gets a verdict: proven (its tests "
                    "passed), untested (they could not run, with the reason) or failed; the "
                    "verdicts and counts are recorded for the browse page. Exit status 1 when "
                    "a cell's tests fail, or cannot run where tests are required.")
    matrix_options(test, help="the matrix.yaml whose cells were built")
    test.add_argument("--out", type=path_argument, default=defaults.OUT,
                      help=f"the output folder the wheels were built into (default: "
                           f"{defaults.OUT})")
    test.add_argument("--only", action="append", metavar="PATTERN", default=[],
                      help="test only cells whose id matches this glob (repeatable)")
    test_options(test)
    test.add_argument("--build-root", type=path_argument, default=None,
                      metavar="DIR", help="where the test environments are made "
                                          f"(default: ${defaults.BUILD_ROOT_VARIABLE}, else "
                                          f"{defaults.BUILD_ROOT})")
    test.add_argument("--runner", choices=RUNNERS, default=None,
                      help="where the tests run (default: as `factory build` chooses)")


def run(args: argparse.Namespace, console: Console) -> int:
    from ..pipeline.options import Given
    from ..pipeline.test import TestRequest, run_kernel_tests
    from ..ui.voice import ConsoleVoice

    out = writable_folder(args.out, "--out", must_exist=True)
    refuse_links(out)
    request = TestRequest(
        matrix=args.matrix, out=out, cache=cache_dir(args),
        given=Given(runner=args.runner, wheelhouses=wheelhouses(args),
                    build_root=args.build_root, offline=args.offline,
                    unconfined=args.unconfined),
        locked=args.locked, torch_pythons=tuple(args.torch_python),
        only=tuple(args.only), require_tests=args.require_tests,
        require_gpu=args.require_gpu)
    return run_kernel_tests(request, ConsoleVoice(console))
