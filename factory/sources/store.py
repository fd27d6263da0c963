"""Fetched kernel trees, kept read-only in the cache: one folder per (kind, commit, subdir).

A tree is written into a temporary folder beside its final place and renamed there in one step,
so a reader never sees half a tree, and two processes fetching the same commit both end up
with one whole copy. Its files are made read-only: the build stages its own copy.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..outputs.files import write_atomic

__all__ = ["TreeStore"]


class TreeStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    def folder(self, kind: str, commit: str, subdir: str | None) -> Path:
        key = hashlib.sha256(f"{kind}\0{commit}\0{subdir or ''}".encode()).hexdigest()[:16]
        return self.root / f"{kind}-{commit[:12]}-{key}"

    def get(self, kind: str, commit: str,
            subdir: str | None) -> tuple[Path, dict[str, Any]] | None:
        folder = self.folder(kind, commit, subdir)
        meta = folder.with_name(folder.name + ".json")
        if folder.is_dir() and meta.is_file():
            found: dict[str, Any] = json.loads(meta.read_text())
            return folder, found
        return None

    def put(self, kind: str, commit: str, subdir: str | None, meta: dict[str, Any],
            fill: Callable[[Path], None]) -> Path:
        """Make the tree with `fill(folder)` unless it is there already."""
        folder = self.folder(kind, commit, subdir)
        if self.get(kind, commit, subdir) is not None:
            return folder
        self.root.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=self.root))
        try:
            fill(scratch)
            _read_only(scratch)
            try:
                os.rename(scratch, folder)
            except OSError:
                if not folder.is_dir():  # not another process's finished copy: a real failure
                    raise
            self.set_meta(kind, commit, subdir, meta)
        finally:
            if scratch.exists():
                shutil.rmtree(scratch)
        return folder

    def set_meta(self, kind: str, commit: str, subdir: str | None,
                 meta: dict[str, Any]) -> None:
        folder = self.folder(kind, commit, subdir)
        write_atomic(folder.with_name(folder.name + ".json"),
                     json.dumps(meta, indent=1, sort_keys=True))


def _read_only(root: Path) -> None:
    """Files lose their write bits; folders stay writable so the cache can be deleted."""
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            info = os.lstat(path)
            if stat.S_ISREG(info.st_mode):
                os.chmod(path, stat.S_IMODE(info.st_mode) & ~0o222)
