"""What the subcommands share: argparse that reports a bad argument as bad input, argument
types, the source options, the consoles, and the index summary line.

The subcommand modules import the steps they run inside `run()`, not at the top: `factory`
then starts without loading every library of every step (pydantic through pypi-simple, twine,
huggingface_hub), which most commands never touch."""

from __future__ import annotations

import argparse
import io
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, TextIO, cast

from rich.console import Console

from ..errors import ConfigError
from ..system.cache import default_cache_dir
from ..trust.credentials import redact, refuse_credentials
from ..values.units import human_size, parse_duration, parse_size

if TYPE_CHECKING:
    from ..cells.options import BuildOptions
    from ..cells.run import CellResult, CellTests
    from ..cells.runners import Runner
    from ..config.model import RunnerChoice, SizeLimit
    from ..index.update import IndexSummary
    from ..plan.cells import Plan

__all__ = ["Parser", "cache_dir", "duration", "index_url", "make_console", "matrix_options",
           "matrix_runner", "only_cells", "path_argument", "port", "positive", "print_index",
           "print_served", "say_error", "say_to", "shard", "site_limit_option", "size",
           "size_limit", "source_options", "test_options", "test_table", "wheel_paths",
           "writable_folder"]


class Parser(argparse.ArgumentParser):
    """argparse, but a bad argument is one line and exit status 2 (not a usage dump)."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"{message} (see '{self.prog} --help')")


def path_argument(text: str) -> Path:
    """A path argument: not empty (which would mean the working directory), no NUL byte."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty (give '.' for this folder)")
    if "\0" in text:
        raise argparse.ArgumentTypeError("holds a NUL byte")
    return Path(text)


def writable_folder(path: Path, key: str, must_exist: bool = False) -> Path:
    """A folder the command may write into (made later when missing): refused, before anything
    is written, when it is a file, lies under a file, or cannot be written by this user."""
    if path.exists() and not path.is_dir():
        raise ConfigError("exists and is not a folder", file=path, key=key)
    if must_exist and not path.is_dir():
        raise ConfigError("no such folder", file=path, key=key)
    existing = path
    while not existing.exists() and existing != existing.parent:
        if existing.is_symlink():
            raise ConfigError("is a link to a missing folder", file=existing, key=key)
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"cannot be made: {existing} is not a folder", file=path, key=key)
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"cannot be written by this user ({existing} is read-only)",
                          file=path, key=key)
    return path


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
    from ..plan.jobs import parse_shard

    try:
        return parse_shard(text)
    except ConfigError as error:
        raise argparse.ArgumentTypeError(error.message) from None


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
    """The cache folder (--cache-dir, else the environment's or the user's), checked before
    anything is fetched into it."""
    given = getattr(args, "cache_dir", None)
    folder = given or default_cache_dir()
    key = "--cache-dir" if given else "cache"
    try:
        return writable_folder(folder, key).resolve()
    except (OSError, RuntimeError) as exc:
        raise ConfigError(f"cannot be used ({exc})", file=folder, key=key) from None


class _Redacting(io.TextIOBase):
    """A text stream that masks URL credentials and the environment's secrets in whatever is
    written to it (credentials.redact): the console's file, so that nothing the factory
    prints, tables included, shows a secret."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(redact(text))
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return self._stream.isatty()

    def fileno(self) -> int:
        return self._stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._stream, "encoding", "utf-8")


def make_console(stderr: bool) -> Console:
    """Rich output, secrets masked; off a terminal (CI logs, pipes) wide enough that paths
    stay on one line."""
    stream = cast(TextIO, _Redacting(sys.stderr if stderr else sys.stdout))
    console = Console(file=stream, highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(file=stream, highlight=False, width=160)
    return console


def say_to(console: Console, style: str | None = None) -> Callable[[str], None]:
    """A function that prints one plain line (no markup) to `console`."""
    def say(text: str) -> None:
        console.print(text, style=style, markup=False, soft_wrap=True)
    return say


def say_error(console: Console, message: str) -> None:
    """An error as one line, whatever the message holds: credentials masked, line breaks
    folded."""
    line = " ".join(redact(message).split())
    console.print(f"error: {line}", markup=False, soft_wrap=True)


def print_index(console: Console, out: Path, summary: IndexSummary,
                site_limit: SizeLimit | None = None) -> int:
    """The index summary line, a warning when the site nears `site_limit`, and one error line
    for each file the index left out or put right; the exit status (1 when there was any)."""
    console.print(f"index: {summary.wheels} wheel(s) of {summary.projects} project(s), "
                  f"{human_size(summary.wheel_bytes)}, in {out}/simple/ and one index per cell "
                  f"({', '.join(summary.labels) or 'none yet'}); {summary.pages_written} "
                  f"page(s) written, {summary.pages_removed} removed", markup=False,
                  soft_wrap=True)
    errors = make_console(stderr=True)
    if site_limit is not None and summary.wheel_bytes >= SITE_WARNING * site_limit.bytes:
        share = summary.wheel_bytes / site_limit.bytes
        errors.print(f"warning: {out} holds {human_size(summary.wheel_bytes)} of wheels, "
                     f"{share:.0%} of {site_limit.describe()} for a published site; serve "
                     "the wheels from elsewhere (release assets, a bucket) before it is full",
                     markup=False, soft_wrap=True)
    for problem in summary.problems:
        say_error(errors, problem)
    return 1 if summary.problems else 0


# A site's size is warned of from this share of its host's limit on.
SITE_WARNING = 0.8


def size_limit(text: str) -> SizeLimit:
    """--max-wheel-size: a size or one of the hosts' presets."""
    from ..config.model import parse_size_limit

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
    from ..config.model import SITE_PRESETS, parse_size_limit

    if text == "none":
        return None
    try:
        return parse_size_limit(text, SITE_PRESETS)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc}, or none") from None


def print_served(console: Console, plan: Plan, results: list[CellResult]) -> None:
    """One line per stable-ABI cell with a wheel: the cells whose indexes list it."""
    kept = {result.cell_id for result in results if result.status in ("built", "unchanged")}
    for cell in plan.cells:
        served = plan.serves(cell.id)
        if served and cell.id in kept:
            console.print(f"{cell.id}: one stable-ABI wheel (torch{cell.torch_pin}) for the "
                          f"cells {', '.join(s.label for s in served)}", markup=False,
                          soft_wrap=True)


def test_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--require-gpu", action="store_true",
                        help="fail when the kernel tests ran with no GPU (GPU tests are "
                             "otherwise reported as skipped on such a machine)")


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


def matrix_runner(args: argparse.Namespace, plan: Plan, cache: Path, options: BuildOptions,
                  console: Console) -> Runner:
    """The runner --runner (else the matrix's runner: key, else the default) asks for, not yet
    entered; the choice and why are printed."""
    from .. import defaults
    from ..cells.runners import choose_runner

    requested: RunnerChoice = args.runner or plan.matrix.runner or defaults.RUNNER
    runner, why = choose_runner(requested, plan, cache, options, plan.matrix.docker_base)
    console.print(f"runner: {runner.name} ({why})", markup=False, soft_wrap=True)
    return runner


def only_cells(plan: Plan, patterns: list[str]) -> Plan:
    """The plan's cells whose ids match one of `--only`'s globs (all without any)."""
    if not patterns:
        return plan
    selected = plan.only(patterns)
    if not selected.cells and not selected.skipped:
        ids = ", ".join([c.id for c in plan.cells] + [s.id for s in plan.skipped])
        raise ConfigError(f"{' '.join(patterns)!r} matches no cell (cells: {ids})",
                          key="--only")
    return selected


def test_table(console: Console, tested: list[CellTests], require_gpu: bool) -> int:
    """Each cell's test outcome, one row each; the exit status (1 when a cell's tests failed
    or could not run, or, with `require_gpu`, ran without a GPU)."""
    from rich.table import Table

    table = Table(title="kernel tests", title_justify="left")
    for column in ("cell", "tests", "log"):
        table.add_column(column, overflow="fold")
    status = 0
    for entry in tested:
        report = entry.report
        if report is None and entry.no_tests:
            table.add_row(entry.cell_id, f"[yellow]none: {entry.detail}[/yellow]", "")
            continue
        if report is None:
            status = 1
            table.add_row(entry.cell_id, f"[red]not run: {entry.detail}[/red]", str(entry.log))
            continue
        bad = not report.ok or (require_gpu and not report.gpus)
        status |= bad
        style = "red" if bad else "green"
        table.add_row(entry.cell_id, f"[{style}]{report.describe()}[/{style}]", str(entry.log))
    console.print(table)
    if require_gpu and any(entry.report and not entry.report.gpus for entry in tested):
        console.print("--require-gpu: some cells' tests ran with no GPU", markup=False)
    return status


def wheel_paths(paths: list[Path]) -> list[Path]:
    for path in paths:
        if not path.is_file():
            raise ConfigError("no such wheel", file=path)
        if path.suffix != ".whl":
            raise ConfigError("not a .whl file", file=path)
    return paths
