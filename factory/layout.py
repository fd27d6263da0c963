"""Where everything lives inside an output folder (default index/): one definition for the
build, which publishes wheels, logs and cell records there, and for the index, merge and
publish steps, which read them and write pages beside them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["Layout"]


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
    def manifest(self) -> Path:
        return self.private / "manifest.json"

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
