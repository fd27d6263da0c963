"""`factory inspect WHEEL...`: what each wheel holds, and the gates' verdict on it."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from rich.console import Console

from .common import path_argument, wheel_paths

__all__ = ["add", "run"]


def add(commands: Any) -> None:
    inspect = commands.add_parser(
        "inspect", help="show what a wheel holds and check it",
        description="Show each wheel's tags, torch pin, GPU code, libraries, manylinux and abi3 "
                    "verdicts and provenance, and run the publishing checks on it. Exit "
                    "status 1 when a check fails.")
    inspect.add_argument("wheels", type=path_argument, nargs="+", metavar="WHEEL")
    inspect.add_argument("--json", action="store_true",
                         help="print the stable JSON report (kernel-wheel-factory/inspect/1)")
    inspect.add_argument("--load-with", type=path_argument, metavar="PYTHON",
                         help="import each wheel with the torch of this interpreter (in a "
                              "throw-away folder) and show the ops it registers and whether "
                              "torch.compile can trace them; without it, what the build's "
                              "import gate recorded is shown for a wheel of an output folder")


def run(args: argparse.Namespace, console: Console) -> int:
    from ..pipeline.inspect import inspect_wheels
    from ..ui.inspect import print_report, report_json

    inspected = inspect_wheels(wheel_paths(args.wheels), args.load_with)
    if args.json:
        document = report_json(inspected)
        sys.stdout.write(json.dumps(document, indent=2, sort_keys=True) + "\n")
    else:
        for number, wheel in enumerate(inspected):
            if number:
                console.print()
            print_report(wheel, console)
    return 1 if any(wheel.problems for wheel in inspected) else 0
