"""`factory verify WHEEL`: rebuild a wheel from its provenance and compare the bytes."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from .common import cache_dir, path_argument, wheel_paths

__all__ = ["add", "run"]


def add(commands: Any) -> None:
    verify = commands.add_parser(
        "verify", help="rebuild a wheel from its provenance and compare sha256",
        description="Build WHEEL again from the source, cell and toolchain its provenance "
                    "records, and report whether the result is byte-identical.")
    verify.add_argument("wheel", type=path_argument, metavar="WHEEL")
    verify.add_argument("--source", type=path_argument, default=None, metavar="DIR",
                        help="the kernel's source (default: the recorded location, from here)")
    verify.add_argument("--cache-dir", type=path_argument, default=None, metavar="DIR",
                        help="toolkits and torch environments (default: the factory's cache)")
    verify.add_argument("--build-root", type=path_argument, default=None, metavar="DIR",
                        help="build somewhere else than the recorded build folder (the result "
                             "then differs)")


def run(args: argparse.Namespace, console: Console) -> int:
    from ..pipeline.verify import verify

    wheel = wheel_paths([args.wheel])[0]
    console.print(f"rebuilding {wheel.name} from its provenance ...")
    verdict = verify(wheel, args.source, cache_dir(args), args.build_root)
    if verdict.problem:
        console.print(f"[red]cannot verify:[/red] {verdict.problem}")
        return 1
    console.print(f"recorded sha256 {verdict.expected_sha256}")
    console.print(f"rebuilt  sha256 {verdict.actual_sha256}  ({verdict.rebuilt})")
    if verdict.matches:
        console.print("[green]verified: the rebuilt wheel is byte-identical[/green]")
        return 0
    console.print("[red]differs:[/red] " + (", ".join(verdict.differing_files) or "zip layout"))
    if verdict.builder:
        console.print(f"  it was built in a {verdict.builder} container and rebuilt on this host",
                      markup=False, soft_wrap=True)
    for tool in verdict.differing_tools:
        console.print(f"  toolchain {tool}", markup=False)
    console.print(f"log: {verdict.log}")
    return 1
