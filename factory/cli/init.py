"""`factory init [PATH]`: write a first matrix.yaml (and a GitHub workflow) for a kernel repo."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console

from .. import defaults
from ..values.versions import Version
from .common import path_argument, positive

__all__ = ["add", "run"]



def _versions(text: str) -> tuple[Version, ...]:
    try:
        found = tuple(Version(part.strip()) for part in text.split(",") if part.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not found:
        raise argparse.ArgumentTypeError("names no version")
    return found


def add(commands: Any) -> None:
    init = commands.add_parser(
        "init", help="write a first matrix.yaml for a kernel repo",
        description="Read the kernel repo at PATH (a kernel-builder build.toml, or a setup.py / "
                    "pyproject.toml project) and write a matrix.yaml for it: the newest torch "
                    "releases the kernel accepts, the CUDA version of each one's PyPI build, "
                    "and each CUDA version's default SMs that the kernel's cuda-capabilities "
                    "serve. With --github, also a workflow that builds it on every push and "
                    "publishes the index to GitHub Pages.")
    init.add_argument("path", nargs="?", type=path_argument, default=Path("."),
                      help="the kernel repo (default: this folder)")
    init.add_argument("--out", type=path_argument, metavar="FILE",
                      help="the matrix file to write (default: PATH/matrix.yaml)")
    init.add_argument("--newest", type=positive, default=defaults.NEWEST_TORCHES, metavar="N",
                      help="how many of the newest torch releases to cover (default "
                           f"{defaults.NEWEST_TORCHES})")
    init.add_argument("--torch", type=_versions, default=(), metavar="VERSIONS",
                      help="these torch releases instead, comma-separated (2.11,2.12)")
    init.add_argument("--sms", type=_versions, default=(), metavar="SMS",
                      help="only these SMs, comma-separated (9.0,10.0), instead of each CUDA "
                           "version's default list")
    init.add_argument("--follow", action="store_true",
                      help="follow torch releases instead of listing them: torch: {latest: N} "
                           "and cuda: {follow: torch}, resolved by `factory lock`")
    init.add_argument("--python", type=_versions, default=(), metavar="VERSIONS",
                      help="the CPythons of a setup.py project's per-Python wheels, "
                           "comma-separated (default: the Python the factory runs on)")
    init.add_argument("--github", action="store_true",
                      help=f"also write {defaults.INIT_WORKFLOW.as_posix()} beside the matrix: "
                           "a caller of the factory's reusable workflow")
    init.add_argument("--ref", metavar="COMMIT",
                      help="the commit of kernel-wheel-factory the workflow's caller pins (40 "
                           "hex digits; default: the commit this factory was installed from)")
    init.add_argument("--force", action="store_true",
                      help="replace files that are already there")


def run(args: argparse.Namespace, console: Console) -> int:
    from ..pipeline.init import InitRequest, init_kernel

    outcome = init_kernel(InitRequest(args.path, args.out, args.newest, args.torch, args.sms,
                                      args.python, args.follow, args.github, args.ref,
                                      args.force))
    proposal, matrix = outcome.proposal, outcome.matrix
    cells = sum(len(versions) for _, _, versions in proposal.cudas)
    console.print(f"wrote {matrix}: {proposal.spec.name}, torch "
                  f"{', '.join(map(str, proposal.torches))}, {cells} cell(s)", markup=False,
                  soft_wrap=True)
    for reason in proposal.dropped:
        console.print(f"left out {reason}", markup=False, soft_wrap=True)
    for reason in proposal.skipped:
        console.print(f"{proposal.spec.name} fits no cell of {reason}", markup=False,
                      soft_wrap=True)
    if outcome.workflow is not None:
        console.print(f"wrote {outcome.workflow}", markup=False, soft_wrap=True)
    console.print(f"next: factory plan {matrix}", markup=False, soft_wrap=True)
    return 0
