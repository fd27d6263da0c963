"""`factory index`: regenerate an output folder's pages, or merge several into one."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from .. import defaults
from ..errors import ConfigError
from ..outputs.layout import writable_folder
from ..trust.credentials import refuse_credentials
from ..ui.outcomes import show_index
from .common import path_argument, site_limit_option

__all__ = ["add", "run"]


def add(commands: Any) -> None:
    index = commands.add_parser(
        "index", help="regenerate the package index pages of an output folder",
        description="Regenerate the per-cell and combined PEP 503/691 indexes and the browse "
                    "page from the wheels in <out>/files (factory build does this at its end).")
    index.add_argument("--out", type=path_argument, default=defaults.OUT,
                       help=f"output folder (default: {defaults.OUT})")
    index.add_argument("--merge", nargs="+", default=None, metavar="DIR|URL",
                       help="first copy in the wheels, logs and cell outcomes of these output "
                            "folders (build jobs' artifacts), and the wheels and yanks of "
                            "indexes published at these http(s) URLs; --out is made when "
                            "missing")
    index.add_argument("--force", action="store_true",
                       help="accept a published wheel whose bytes changed")
    site_limit_option(index)
    index.add_argument("--variants", action="store_true",
                       help="also publish each compiled wheel as a PEP 825 variant wheel (the "
                            "same binaries) in the variants index of its torch release, "
                            "variants/torchXY/simple/ (matrix.yaml's variants: true does this "
                            "in factory build)")
    index.add_argument("--verify", action="store_true",
                       help="write nothing: hash every published file and its .metadata and "
                            "report each one that differs from the manifest")


def run(args: argparse.Namespace, console: Console) -> int:
    from ..pipeline.index import IndexRequest, make_index, verify_published

    if args.verify and (args.merge or args.force or args.variants):
        raise ConfigError("checks an index as it is; it takes no --merge, --force or "
                          "--variants", key="--verify")
    if args.verify:
        verdict = verify_published(args.out)
        for problem in verdict.problems:
            console.print(f"mismatch: {problem}", markup=False, soft_wrap=True)
        said = f"{len(verdict.problems)} mismatch(es)" if verdict.problems else \
            "every byte matches"
        console.print(f"verified {verdict.checked} published file(s), their .metadata and every "
                      f"page against {args.out}/.factory/manifest.json: {said}",
                      markup=False, soft_wrap=True)
        return 1 if verdict.problems else 0
    out = writable_folder(args.out, "--out", must_exist=not args.merge)
    for source in args.merge or ():
        refuse_credentials(source, key="--merge", instead="a private index is merged from "
                           "a folder, or reached through a netrc file")
    summary = make_index(IndexRequest(out, tuple(args.merge or ()), args.force, args.variants))
    show_index(console, out, summary, args.site_limit)
    return 1 if summary.problems else 0
