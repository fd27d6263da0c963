"""`factory publish [DIR]`: the wheels to a PyPI-compatible registry (twine), or the static
index to a folder, s3:// or hf://."""

from __future__ import annotations

import argparse
import os
from typing import Any

from rich.console import Console

from .. import defaults
from ..pipeline.arguments import CLASH_POLICIES
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
    from ..pipeline.publish import PublishRequest, publish

    say = say_to(console)
    for key, url in (("--to", args.to), ("--repository-url", args.repository_url),
                     ("--index-url", args.index_url),
                     ("TWINE_REPOSITORY_URL", os.environ.get("TWINE_REPOSITORY_URL"))):
        if url is not None:
            refuse_credentials(url, key=key, instead=CREDENTIALS_HINT)
    say(publish(PublishRequest(args.folder, cache_dir(args), args.to, args.repository_url,
                               args.repository, args.index_url, args.dry_run, args.name_clash),
                say))
    return 0
