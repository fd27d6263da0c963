"""How the cells of one run are built, resolved once: the build root and the time every file of
the wheels carries."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError
from ..plan.model import Cell
from ..system.machine import Machine

__all__ = ["LATEST_ZIP_TIME", "BuildOptions", "source_date_epoch", "usable_build_root"]

LATEST_ZIP_TIME = 4354819199  # 2107-12-31T23:59:59Z: a zip's DOS time stops there


@dataclass(frozen=True)
class BuildOptions:
    """How cells are built, the same for every cell of a run."""

    build_root: Path  # a fixed path: nvcc writes the source's absolute path into the object
    source_date_epoch: int | None  # from the environment; else each source's own time
    builder: str | None = None  # the builder image, for builds in a container
    offline: bool = False  # download nothing: toolkits and torch from the machine or caches
    index_url: str | None = None  # the index's public URL: the import guard names it
    unconfined: bool = False  # the code of others runs on this machine without the sandbox
    wheelhouses: tuple[Path, ...] = ()  # folders of wheels the test environments may use
    machine: Machine = field(default_factory=Machine)  # the compilers and toolkits it names

    def epoch(self, cell: Cell) -> int:
        return self.source_date_epoch if self.source_date_epoch is not None else cell.source.epoch


def usable_build_root(path: Path, key: str = "--build-root") -> Path:
    """A build root: absolute (it is written into the objects) and usable by this user."""
    if not path.is_absolute():
        raise ConfigError("must be an absolute path (it is written into the build)", file=path,
                          key=key)
    if path.is_symlink():
        raise ConfigError("is a link; cells are compiled, removed and made again in the build "
                          f"root, so name the folder itself: pass {key} DIR", file=path, key=key)
    if path.resolve() == Path("/"):
        raise ConfigError(f"is the file system's root; pass {key} DIR, a folder of its own",
                          file=path, key=key)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot be made ({exc.strerror}); pass {key} DIR", file=path,
                          key=key) from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(f"is not writable by this user (another user's builds?); pass {key} "
                          "DIR", file=path, key=key)
    return path


def source_date_epoch(environ: Mapping[str, str] = os.environ) -> int | None:
    """SOURCE_DATE_EPOCH, when set: the time every file of every wheel carries."""
    text = environ.get("SOURCE_DATE_EPOCH")
    if text is None:
        return None
    if not text.strip().isdigit():
        raise ConfigError(f"'{text}' is not a whole number of seconds since 1970",
                          key="SOURCE_DATE_EPOCH")
    if len(text.strip()) > 12 or int(text) > LATEST_ZIP_TIME:
        raise ConfigError(f"'{text}' is after 2107-12-31, the last time a wheel (a zip file) "
                          "can record", key="SOURCE_DATE_EPOCH")
    return int(text)
