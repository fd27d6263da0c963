"""One error hierarchy for the whole factory; the CLI turns each into an exit status."""

from __future__ import annotations

from pathlib import Path


class FactoryError(Exception):
    """An error the user can act on; printed as one line, exit status 1."""

    exit_status = 1


class ConfigError(FactoryError):
    """Bad input (matrix.yaml, build.toml, CLI arguments): exit status 2, nothing written.

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


class SourceError(FactoryError):
    """A kernel source could not be fetched (network, a cache miss offline): exit status 1."""


class BuildError(FactoryError):
    """A cell failed to build (compiler error, toolchain missing, ...)."""


def _display_path(path: Path) -> str:
    """Paths relative to the working directory when they are inside it, else absolute."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)
