"""`factory yank NAME VERSION`: mark a published release yanked (PEP 592)."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from .. import defaults
from ..outputs.layout import writable_folder
from .common import path_argument

__all__ = ["add", "run"]


def add(commands: Any) -> None:
    command = commands.add_parser(
        "yank", help="mark a published release yanked",
        description="Mark the wheels of NAME VERSION yanked (PEP 592) in every index, or only "
                    "in one cell's with --label; pip and uv then skip them unless pinned.")
    command.add_argument("name", metavar="NAME")
    command.add_argument("version", metavar="VERSION",
                         help="1.0.0 (every label) or 1.0.0+cu130torch211")
    command.add_argument("--label", default=None, help="only this cell's wheel")
    command.add_argument("--reason", required=True, help="shown to users by pip and uv")
    command.add_argument("--out", type=path_argument, default=defaults.OUT,
                         help=f"output folder (default: {defaults.OUT})")


def run(args: argparse.Namespace, console: Console) -> int:
    from ..pipeline.index import yank_release

    writable_folder(args.out, "--out", must_exist=True)
    for filename in yank_release(args.out, args.name, args.version, args.label, args.reason):
        console.print(f"yanked {filename}: {args.reason}", markup=False, soft_wrap=True)
    return 0
