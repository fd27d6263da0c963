"""What the subcommands share: argparse that reports a bad argument as bad input, argument
types and the options several commands take. Rendering lives in ui/, the work in pipeline/
and the steps.

The subcommand modules import the steps they run inside `run()`, not at the top: `factory`
then starts without loading every library of every step (pydantic through pypi-simple, twine,
huggingface_hub), which most commands never touch."""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from ..errors import ConfigError
from ..trust.credentials import refuse_credentials
from ..values.units import parse_duration, parse_size

if TYPE_CHECKING:
    from ..pipeline.arguments import Selection, SizeLimit

__all__ = ["Parser", "cache_dir", "duration", "index_url", "matrix_options", "path_argument",
           "port", "positive", "shard", "site_limit_option", "size", "size_limit",
           "source_options", "test_options", "wheel_paths", "wheelhouses"]


class Parser(argparse.ArgumentParser):
    """argparse, but a bad argument is one line and exit status 2 (not a usage dump), and a
    mistyped option or command gets the nearest right one. argparse suggests nothing before
    Python 3.14 and then only among a choice's values, so the matching is done here."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"{message}{_suggestion(self, message)} (see '{self.prog} --help')")

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None,
    ) -> tuple[argparse.Namespace, list[str]]:
        """Options no parser knew are judged by the subcommand's parser, which knows what
        the user meant to give (the top parser knows only its own two options)."""
        parsed, extras = super().parse_known_args(args, namespace)
        command = _command_parser(self, parsed)
        if extras and command is not None:
            command.error("unrecognized arguments: " + " ".join(extras))
        return parsed, extras


def _command_parser(parser: argparse.ArgumentParser,
                    parsed: argparse.Namespace) -> argparse.ArgumentParser | None:
    for action in parser._actions:  # argparse keeps its subcommands nowhere public
        if isinstance(action, argparse._SubParsersAction) and action.dest in vars(parsed):
            chosen = action.choices.get(getattr(parsed, action.dest))
            return chosen if isinstance(chosen, argparse.ArgumentParser) else None
    return None


def _suggestion(parser: argparse.ArgumentParser, message: str) -> str:
    """'; did you mean --runner?' for the words of an argparse error that are near a real
    option string, command or value; empty when none is near."""
    if message.startswith("unrecognized arguments: "):
        known = [name for action in parser._actions for name in action.option_strings]
        words = [word.split("=", 1)[0] for word in message.split(": ", 1)[1].split()
                 if word.startswith("-")]
    elif (wrong := re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message)):
        known = [choice.strip(" '") for choice in wrong.group(2).split(",")]
        words = [wrong.group(1)]
    else:
        return ""
    # the dashes every option shares would make any two options look alike
    bare = {name.lstrip("-"): name for name in known}
    near = [bare[match] for word in words
            for match in difflib.get_close_matches(word.lstrip("-"), bare, n=1, cutoff=0.7)]
    return f"; did you mean {' '.join(dict.fromkeys(near))}?" if near else ""


def path_argument(text: str) -> Path:
    """A path argument: not empty (which would mean the working directory), no NUL byte."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty (give '.' for this folder)")
    if "\0" in text:
        raise argparse.ArgumentTypeError("holds a NUL byte")
    return Path(text)


MAX_COUNT = 4096  # more cells at once, or per job, than any machine or CI runner holds


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    if value > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_COUNT}, got {text}")
    return value


def fraction(text: str) -> float:
    """A share from 0 to 1 (0.1, or 10%)."""
    cleaned = text.strip()
    try:
        value = float(cleaned[:-1]) / 100 if cleaned.endswith("%") else float(cleaned)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a share (e.g. 0.1 or 10%)") from None
    if not 0 <= value <= 1:  # also refuses nan
        raise argparse.ArgumentTypeError(f"'{text}' must be between 0 and 1 (0% and 100%)")
    return value


def shard(text: str) -> tuple[int, int]:
    from ..pipeline.arguments import parse_shard

    try:
        return parse_shard(text)
    except ConfigError as error:
        raise argparse.ArgumentTypeError(error.message) from None


def object_store(text: str) -> str:
    """--object-store: a remote object store's URL, with no password (that belongs in the
    environment)."""
    from ..values.stores import object_store_problem

    problem = object_store_problem(text, password_allowed=False)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"the URL {problem}")
    return text


def size(text: str) -> int:
    """A size in bytes: 7G, 7.5GiB, 4096M, 12000000000."""
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def duration(text: str) -> float:
    """A duration in seconds: 5h30m, 330m, 90s, 19800."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def port(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"'{text}' is not a port number (0 to 65535)")
    return int(text)


def matrix_options(parser: argparse.ArgumentParser, help: str, lockable: bool = True,
                   plans: bool = True) -> None:
    """MATRIX, the cache, how sources are fetched and (for commands that plan cells) which
    torches: what every command that reads a matrix takes."""
    parser.add_argument("matrix", type=path_argument, metavar="MATRIX", help=help)
    parser.add_argument("--cache-dir", type=path_argument, default=None, metavar="DIR",
                        help="toolkits, torch environments and fetched sources "
                             "(default: ~/.cache/kernel-wheel-factory)")
    source_options(parser, lockable)
    if plans:
        parser.add_argument("--torch-python", type=path_argument, action="append", default=[],
                            metavar="PYTHON",
                            help="build against the torch this interpreter has, used as it is, "
                                 "instead of the matrix's torch list (repeatable)")


def new_index(args: argparse.Namespace) -> str | None:
    """--new's index, checked: no credential in a URL, no URL when nothing may be fetched."""
    from ..pipeline.arguments import is_url

    if args.new is None:
        return None
    if is_url(args.new):
        refuse_credentials(args.new, key="--new", instead="a private index is compared from "
                           "a folder, or reached through a netrc file")
        if args.offline:
            raise ConfigError("a URL cannot be read with --offline; give an output folder",
                              key="--new")
    return str(args.new)


def new_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--new", metavar="INDEX",
                        help="leave out the cells whose wheel this index already has: a "
                             "published index's URL (where its simple/ is) or an output folder; "
                             "`factory plan` and `factory build --job` must be given the same")
    parser.add_argument("--select", action="append", default=[], metavar="FIELD=GLOB,...",
                        help="only the cells with these fields (kernel, torch, cuda, python, "
                             "platform), e.g. kernel=img2gray,torch=2.11,cuda=13.0 (repeatable: "
                             "any of them); applied before the cells are split into jobs, so "
                             "`factory plan` and `factory build --job` must be given the same")


def selections(args: argparse.Namespace) -> tuple[Selection, ...]:
    """--select's selections, checked."""
    from ..pipeline.arguments import parse_selection

    return tuple(parse_selection(text) for text in args.select)


def source_options(parser: argparse.ArgumentParser, lockable: bool = True) -> None:
    if lockable:
        parser.add_argument("--locked", action="store_true",
                            help="build the sources the lock file pins (see `factory lock`); "
                                 "fail when one has moved or changed")
    parser.add_argument("--offline", action="store_true",
                        help="download nothing: git and Hub sources come from the cache (refs "
                             "as last fetched; HF_HUB_OFFLINE=1 does this for Hub sources), "
                             "toolkits and torch environments from the machine or the cache, "
                             "no image is pulled")


def cache_dir(args: argparse.Namespace) -> Path:
    """The cache folder settled (pipeline/options.py), checked before anything is fetched into
    it."""
    from ..pipeline.options import cache_folder

    return cache_folder(getattr(args, "cache_dir", None))


def size_limit(text: str) -> SizeLimit:
    """--max-wheel-size: a size or one of the hosts' presets."""
    from ..pipeline.arguments import parse_size_limit

    try:
        return parse_size_limit(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def site_limit_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--site-limit", type=_site_limit, default=_site_limit("github-pages"),
                        metavar="LIMIT",
                        help="warn when the output folder's wheels near this size, as a "
                             "static site host caps it: a size, github-pages (1 GB, the "
                             "default) or none")


def _site_limit(text: str) -> SizeLimit | None:
    from ..pipeline.arguments import SITE_PRESETS, parse_size_limit

    if text == "none":
        return None
    try:
        return parse_size_limit(text, SITE_PRESETS)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc}, or none") from None


def test_options(parser: argparse.ArgumentParser) -> None:
    """How the kernels' own code is proven (build --test and test): what must pass, where it
    runs, what it may be given."""
    parser.add_argument("--unconfined", action="store_true",
                        help="run the code of others on this machine (a setup.py / pyproject "
                             "project's build, a kernel's import gate and tests) without the "
                             "bubblewrap sandbox: it then has your rights, files and network "
                             "(its environment stays allow-listed)")
    parser.add_argument("--require-tests", action="store_true",
                        help="publish no wheel whose tests could not run (untested: no tests/ "
                             "folder, an environment that could not be made, no test "
                             "collected); a kernel's tests: {required: ...} in matrix.yaml "
                             "says it for one kernel")
    parser.add_argument("--require-gpu", action="store_true",
                        help="fail when the kernel tests ran with no GPU (GPU tests are "
                             "otherwise reported as skipped on such a machine)")
    parser.add_argument("--wheelhouse", type=path_argument, action="append", default=[],
                        metavar="DIR",
                        help="a folder of wheels the test environments may be installed from, "
                             "with or without a network (repeatable; the matrix's wheelhouse: "
                             "adds more); `factory wheelhouse MATRIX DIR` makes one")


def wheelhouses(args: argparse.Namespace) -> tuple[Path, ...]:
    """--wheelhouse's folders, each checked before anything is written."""
    from ..pipeline.arguments import wheelhouse_problem

    folders = []
    for folder in args.wheelhouse:
        problem = wheelhouse_problem(folder)
        if problem is not None:
            raise ConfigError(problem, file=folder, key="--wheelhouse")
        folders.append(folder.resolve())
    return tuple(dict.fromkeys(folders))


def index_url(text: str) -> str:
    """The index's public URL (https://host/path), without a trailing slash: never one with a
    credential in it, since it is written into wheels and pages."""
    from urllib.parse import urlsplit

    url = text.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or \
            parts.fragment:
        raise argparse.ArgumentTypeError(f"'{text}' is not an http(s) URL of an index's root "
                                         "(e.g. https://example.org/kernels)")
    try:
        refuse_credentials(url, key="--base-url")
    except ConfigError as error:
        raise argparse.ArgumentTypeError(error.message) from None
    return url


def wheel_paths(paths: list[Path]) -> list[Path]:
    for path in paths:
        if not path.is_file():
            there = path.exists() and not path.is_dir()
            raise ConfigError("not a regular file" if there else "no such wheel", file=path)
        if path.suffix != ".whl":
            raise ConfigError("not a .whl file", file=path)
    return paths
