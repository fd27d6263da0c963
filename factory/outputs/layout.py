"""Where everything lives inside an output folder (default index/): one definition for the
build, which publishes wheels, logs and cell records there, and for the index, merge and
publish steps, which read them and write pages beside them."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError

__all__ = ["PRIVATE_FOLDERS", "Layout", "refuse_links", "writable_folder"]

# Folders of an output folder that stay home: never served, never published. The logs hold
# whatever a build printed; the factory's records (.factory/) its own bookkeeping.
PRIVATE_FOLDERS = frozenset({".factory", "logs"})


@dataclass(frozen=True)
class Layout:
    out: Path

    @property
    def files(self) -> Path:
        """The published wheels and their .metadata files."""
        return self.out / "files"

    @property
    def logs(self) -> Path:
        return self.out / "logs"

    @property
    def private(self) -> Path:
        """The factory's own records; never served or published."""
        return self.out / ".factory"

    @property
    def state(self) -> Path:
        return self.private / "cells"

    @property
    def staging(self) -> Path:
        return self.private / "staging"

    @property
    def publishing(self) -> Path:
        """The publish journal: the wheels builds moved into files/ and no index records yet."""
        return self.private / "publishing"

    @property
    def manifest(self) -> Path:
        return self.private / "manifest.json"

    @property
    def public_url(self) -> Path:
        """Where the index is served (factory attest --url): its pages link provenance files
        by full URL, as PEP 740 asks."""
        return self.private / "public-url"

    @property
    def index_lock(self) -> Path:
        return self.private / "index"

    @property
    def index_in_progress(self) -> Path:
        """Present while an index update runs: found at the start, the last one was killed."""
        return self.private / "index-update-in-progress"

    def log_file(self, cell_key: str) -> Path:
        return self.logs / f"{cell_key}.log"

    def state_file(self, cell_key: str) -> Path:
        return self.state / f"{cell_key}.json"


def refuse_links(root: Path, what: str = "output folder") -> None:
    """Refuse a folder tree the factory is about to write into or prune when a folder inside it
    is a symlink: writing or removing through it would change files outside `root` (the root
    itself may be a link; it is the place the user chose)."""
    if not root.is_dir():
        return
    for folder, dirnames, filenames in os.walk(root, onerror=None, followlinks=False):
        for name in dirnames + filenames:
            path = os.path.join(folder, name)
            # a link to a folder, or to nothing yet (which a folder may become)
            if os.path.islink(path) and not os.path.isfile(path):
                target = os.readlink(path)
                raise ConfigError(f"is a link to {target}; the factory writes only inside its "
                                  f"{what}: put the folder itself there, or remove the link",
                                  file=path)


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
