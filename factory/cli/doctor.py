"""`factory doctor [URL [PACKAGE]]`: this machine's Python, torch, driver and GPUs, and the
install command of an index that fits it (factory/doctor.py, which every index also serves as
doctor.py for machines without the factory)."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from ..ui.console import make_console
from .common import path_argument

__all__ = ["add", "run"]


def add(commands: Any) -> None:
    doctor = commands.add_parser(
        "doctor", help="which wheel of an index fits this machine",
        description="Report Python, platform, glibc, the installed torch (version, CUDA, C++ "
                    "ABI), the driver's CUDA version and every GPU's SM. Given an index URL "
                    "(and a package), print the install command that fits this machine, or "
                    "the nearest wheels and why each does not fit. Exit status 1 when no "
                    "wheel fits.")
    doctor.add_argument("url", nargs="?", help="the index: its root, or a cell's /simple/ URL")
    doctor.add_argument("package", nargs="?", help="the package (default: every one)")
    doctor.add_argument("--json", action="store_true",
                        help="print JSON (kernel-wheel-factory/doctor/1)")
    doctor.add_argument("--python", type=path_argument, default=None, metavar="PYTHON",
                        help="report for this interpreter (the one with the user's torch) "
                             "instead of the factory's own")


def run(args: argparse.Namespace, console: Console) -> int:
    from ..pipeline.doctor import doctor_here, doctor_there

    forwarded = [value for value in (args.url, args.package) if value is not None]
    forwarded += ["--json"] if args.json else []
    if args.python is None:
        return doctor_here(forwarded)
    done = doctor_there(args.python, forwarded)
    # through the console, so that a URL's credentials are masked as everywhere else
    console.print(done.stdout, end="", markup=False, soft_wrap=True, highlight=False)
    if done.stderr:
        make_console(stderr=True).print(done.stderr, end="", markup=False, soft_wrap=True)
    return done.returncode
