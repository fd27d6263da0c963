"""`factory index`: regenerate an output folder's pages, or merge several into one."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console

from .. import defaults
from ..errors import ConfigError
from .common import print_index

__all__ = ["add", "run"]


def add(commands: Any) -> None:
    index = commands.add_parser(
        "index", help="regenerate the package index pages of an output folder",
        description="Regenerate the per-cell and combined PEP 503/691 indexes and the browse "
                    "page from the wheels in <out>/files (factory build does this at its end).")
    index.add_argument("--out", type=Path, default=defaults.OUT,
                       help=f"output folder (default: {defaults.OUT})")
    index.add_argument("--merge", nargs="+", default=None, metavar="DIR|URL",
                       help="first copy in the wheels, logs and cell outcomes of these output "
                            "folders (build jobs' artifacts), and the wheels and yanks of "
                            "indexes published at these http(s) URLs; --out is made when "
                            "missing")
    index.add_argument("--force", action="store_true",
                       help="accept a published wheel whose bytes changed")


def run(args: argparse.Namespace, console: Console) -> int:
    from ..index.merge import is_url, merge_outputs
    from ..index.update import update_index

    out: Path = args.out
    if args.merge:
        if out.exists() and not out.is_dir():
            raise ConfigError("exists and is not a folder", file=out, key="--out")
        sources: list[str | Path] = [source if is_url(source) else Path(source)
                                     for source in args.merge]
        print_index(console, out, merge_outputs(out, sources, force=args.force))
        return 0
    if not out.is_dir():
        raise ConfigError("no such folder", file=out, key="--out")
    print_index(console, out, update_index(out, force=args.force, full=True))
    return 0
