"""`factory publish [DIR]`: the wheels to a PyPI-compatible registry (twine), or the static
index to a folder, s3:// or hf://."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from rich.console import Console

from .. import defaults
from ..config.model import CLASH_POLICIES, NameCheck
from ..errors import ConfigError, PublishError
from ..trust.credentials import refuse_credentials
from ..ui.console import say_to
from .common import cache_dir, path_argument

__all__ = ["add", "run"]

CREDENTIALS_HINT = ("give them through TWINE_USERNAME/TWINE_PASSWORD, keyring or ~/.pypirc "
                    "(a registry), AWS_* variables (s3://) or HF_TOKEN (hf://)")


def add(commands: Any) -> None:
    publish = commands.add_parser(
        "publish", help="upload the wheels to a PyPI-compatible registry with twine, or copy "
        "the static index to a folder, s3:// or hf://",
        description="Without --to: upload the wheels of DIR/files that the registry lacks, "
        "with twine (credentials: TWINE_USERNAME/TWINE_PASSWORD, keyring or ~/.pypirc); a "
        "wheel already there with the same sha256 is skipped, one with other bytes stops the "
        "publish. With --to: copy the static index, wheels first and pages last.")
    publish.add_argument("folder", type=path_argument, nargs="?", default=defaults.OUT,
                         metavar="DIR",
                         help=f"the output folder to publish (default: {defaults.OUT})")
    destination = publish.add_mutually_exclusive_group()
    destination.add_argument("--repository-url", metavar="URL", default=None,
                             help="the registry's upload URL (default: TWINE_REPOSITORY_URL, "
                             "else the --repository section, else PyPI)")
    destination.add_argument("--repository", metavar="NAME", default=None,
                             help="a repository section of ~/.pypirc")
    destination.add_argument("--to", metavar="TARGET", default=None,
                             help="a folder, s3://BUCKET[/PREFIX] or "
                             "hf://[datasets/|spaces/]OWNER/NAME[@REVISION][/PATH]")
    publish.add_argument("--index-url", metavar="URL", default=None,
                         help="the registry's simple index, when it is not <upload URL>/simple/")
    publish.add_argument("--dry-run", action="store_true",
                         help="say what would be sent, send nothing")
    publish.add_argument("--name-clash", choices=CLASH_POLICIES, default="warn",
                         help="what a wheel named like a project of PyPI (or of "
                         f"${defaults.NAME_INDEX_VARIABLE}) gets: a warning with the install "
                         "commands that still reach this index's wheel (default), a refusal "
                         "that sends nothing, or no check")


def run(args: argparse.Namespace, console: Console) -> int:
    from ..publish.registry import publish_to_registry
    from ..publish.static import publish_static

    say = say_to(console)
    for key, url in (("--to", args.to), ("--repository-url", args.repository_url),
                     ("--index-url", args.index_url),
                     ("TWINE_REPOSITORY_URL", os.environ.get("TWINE_REPOSITORY_URL"))):
        if url is not None:
            refuse_credentials(url, key=key, instead=CREDENTIALS_HINT)
    if not args.folder.is_dir():
        raise ConfigError("no such folder", file=args.folder)
    _check_names(args, say)
    if args.to is not None:
        if args.index_url is not None:
            raise ConfigError("only applies to a registry, not with --to", key="--index-url")
        report = publish_static(args.folder, args.to, dry_run=args.dry_run, say=say)
        say(f"{'would send' if args.dry_run else 'sent'} {len(report.sent)} file(s) to "
            f"{report.target}, {report.unchanged} unchanged")
        return 0
    registry = publish_to_registry(args.folder, repository_url=args.repository_url,
                                   repository=args.repository, index_url=args.index_url,
                                   dry_run=args.dry_run, say=say)
    say(f"{'dry run: nothing uploaded' if args.dry_run else f'uploaded {len(registry.uploaded)}'}"
        f", {len(registry.skipped)} already there"
        + (f", {len(registry.yanked)} yanked left out" if registry.yanked else ""))
    return 0


def _check_names(args: argparse.Namespace, say: Callable[[str], None]) -> None:
    """The name-clash guard on the wheels of the folder, before anything is sent."""
    from packaging.version import Version

    from ..pipeline.names import check_names
    from ..publish.registry import local_wheels

    if args.name_clash == "ignore" or not (args.folder / "files").is_dir():
        return
    newest: dict[str, str] = {}
    for wheel in local_wheels(args.folder)[0]:
        if wheel.project not in newest or \
                Version(wheel.version) > Version(newest[wheel.project]):
            newest[wheel.project] = wheel.version
    check_names(newest, NameCheck(args.name_clash), cache_dir(args), False, say,
                lambda text: PublishError(f"{text}; nothing was sent"))
