"""Every error the factory raises on purpose, each with its exit status.

The command line catches `FactoryError` once and prints it as one line; anything else that
escapes is a bug, reported as such (and, inside a cell, written with its traceback to the
cell's log).

    2  bad input: a file, line and key the user can fix; nothing was written
    1  the work failed: a fetch, a build, an index update or a publish
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "BuildError",
    "ConfigError",
    "FactoryError",
    "FatbinError",
    "IndexConflict",
    "NotAnElfFile",
    "NotStarted",
    "OutputOverflow",
    "ProcessError",
    "PublishError",
    "SourceError",
    "SourceRefused",
    "TimedOut",
    "WheelReadError",
    "describe_os_error",
]


class FactoryError(Exception):
    """An error the user can act on; printed as one line."""

    exit_status = 1


class ConfigError(FactoryError):
    """Bad input (matrix.yaml, build.toml, the lock file, CLI arguments): nothing is written.

    The message names the file, the line and the key, so the user can go straight there.
    """

    exit_status = 2

    def __init__(self, message: str, *, file: Path | str | None = None,
                 line: int | None = None, key: str | None = None) -> None:
        self.message = message
        self.file = Path(file) if file is not None else None
        self.line = line
        self.key = key
        super().__init__(self.render())

    def render(self) -> str:
        where = ""
        if self.file is not None:
            where = _display_path(self.file)
            if self.line is not None:
                where += f":{self.line}"
            where += ": "
        key = f"{self.key}: " if self.key else ""
        return f"{where}{key}{self.message}"


class SourceRefused(ConfigError):
    """A kernel source names something that is not there (a repo, a revision, a folder) or holds
    something the factory refuses (an unsafe name, a link out of the repo). The fetchers raise it
    bare; the resolver adds the matrix entry it came from."""


class SourceError(FactoryError):
    """A kernel source could not be fetched (network, a cache miss offline)."""

    exit_status = 1


class BuildError(FactoryError):
    """A cell failed to build (compiler error, toolchain missing, a gate failed, ...)."""

    exit_status = 1


class Unavailable(BuildError):
    """What a cell needs cannot be had on this machine (a free-threaded interpreter nothing here
    provides): the cell is skipped, with this reason, rather than failed."""


class CommandFailed(BuildError):
    """A tool of the build exited with an error; `output` is what it printed."""

    def __init__(self, message: str, output: str) -> None:
        super().__init__(message)
        self.output = output


class ProcessError(FactoryError):
    """A program could not be run to its end: it did not start, ran past its time limit or
    printed more than its output cap (system/process.py starts every program)."""

    exit_status = 1


class NotStarted(ProcessError):
    """The program is not there or cannot be executed; `reason` is the system's word."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class TimedOut(ProcessError):
    """The program ran past its time limit and was killed with everything it started."""

    def __init__(self, message: str, seconds: float) -> None:
        super().__init__(message)
        self.seconds = seconds


class OutputOverflow(ProcessError):
    """The program printed more than its output cap and was killed."""


class WheelReadError(ConfigError):
    """A file given as a wheel is not one the factory can read."""


class NotAnElfFile(WheelReadError):
    """A wheel member that looks like an ELF file is not a readable one."""


class FatbinError(FactoryError):
    """A shared object's .nv_fatbin section cannot be read: recorded against the object, so
    the GPU-code gate reports it."""

    exit_status = 1


class IndexConflict(FactoryError):
    """The index cannot be updated without losing or changing something published."""

    exit_status = 1


class PublishError(FactoryError):
    """A registry or static target refused something, or holds other bytes under a published
    name."""

    exit_status = 1


def describe_os_error(error: OSError) -> str:
    """An operating system's refusal as one line: the path(s) and the reason."""
    reason = error.strerror or str(error) or type(error).__name__
    paths = [_display_path(Path(os.fsdecode(name)))
             for name in (error.filename, error.filename2) if isinstance(name, (str, bytes))
             and name]
    return f"{' -> '.join(paths)}: {reason}" if paths else reason


def _display_path(path: Path) -> str:
    """Paths relative to the working directory when they are inside it, else absolute; a link
    is shown as itself, not as where it leads."""
    try:
        return str((path.parent.resolve() / path.name).relative_to(Path.cwd().resolve()))
    except (ValueError, OSError, RuntimeError):  # RuntimeError: a symlink loop (Python < 3.13)
        return str(path)
