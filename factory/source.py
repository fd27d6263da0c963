"""Kernel sources: a folder resolved to a tree and the revision that names its build.

The revision seeds the op namespace (`_<name>_<7 hex>`), so two builds of different source
never register ops under the same name, and an unchanged tree keeps its name across runs.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

# Folders that are never part of a kernel's source.
IGNORED_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", ".pytest_cache", ".mypy_cache",
                          ".ruff_cache", ".venv", "result"})


@dataclass(frozen=True)
class SourceTree:
    root: Path
    revision: str  # hex: a content digest for plain folders
    kind: str

    @property
    def short(self) -> str:
        return self.revision[:7]


def resolve_path_source(root: Path) -> SourceTree:
    return SourceTree(root, tree_digest(root), "path")


def source_files(root: Path) -> list[Path]:
    """Every file of the tree, relative and sorted, skipping VCS and cache folders."""
    found = []
    for folder, dirs, files in os.walk(root):
        base = Path(folder)
        links = [d for d in dirs if (base / d).is_symlink()]
        dirs[:] = sorted(d for d in dirs if d not in IGNORED_DIRS and d not in links)
        for name in files + links:
            if name.endswith((".pyc", ".pyo")):
                continue
            found.append((base / name).relative_to(root))
    return sorted(found, key=lambda p: p.as_posix())


def tree_digest(root: Path) -> str:
    """sha256 over the tree's paths, executable bits, symlink targets and contents."""
    digest = hashlib.sha256()
    for relative in source_files(root):
        path = root / relative
        info = path.lstat()
        digest.update(relative.as_posix().encode() + b"\0")
        if stat.S_ISLNK(info.st_mode):
            digest.update(b"L" + os.readlink(path).encode() + b"\0")
            continue
        digest.update(b"X" if info.st_mode & stat.S_IXUSR else b"F")
        digest.update(f"{info.st_size}\0".encode())
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        digest.update(b"\0")
    return digest.hexdigest()
