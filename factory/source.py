"""Kernel sources: a folder resolved to a tree and the revision that names its build.

The revision seeds the op namespace (`_<name>_<7 hex>`), so two builds of different source
never register ops under the same name, and an unchanged tree keeps its name across runs.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

# Folders that are never part of a kernel's source.
IGNORED_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", ".pytest_cache", ".mypy_cache",
                          ".ruff_cache", ".venv", "result"})


# The earliest time a zip entry can hold (1980-01-01): the timestamp of last resort.
ZIP_EPOCH = 315532800


@dataclass(frozen=True)
class GitState:
    commit: str  # the last commit that changed the kernel's folder
    dirty: bool  # the folder has changes no commit holds
    time: int  # that commit's time (seconds since the epoch)


@dataclass(frozen=True)
class SourceTree:
    root: Path
    revision: str  # hex: a content digest for plain folders
    kind: str
    location: str  # how the matrix names it: a path relative to the matrix's folder
    newest_mtime: int  # the newest file's modification time
    git: GitState | None = None

    @property
    def short(self) -> str:
        return self.revision[:7]

    @property
    def epoch(self) -> int:
        """The source's own time, which dates the wheel's files: the commit's time for a clean
        git folder, else the newest file's modification time."""
        if self.git is not None and not self.git.dirty:
            return self.git.time
        return max(self.newest_mtime, ZIP_EPOCH)


def source_facts(tree: SourceTree) -> dict:
    """What is known of a source besides its files, for a build that runs elsewhere."""
    git = tree.git
    return {"revision": tree.revision, "kind": tree.kind, "location": tree.location,
            "newest_mtime": tree.newest_mtime,
            "git": [git.commit, git.dirty, git.time] if git else None}


def source_from_facts(facts: dict, root: Path) -> SourceTree:
    """The source_facts() of a tree whose files are now at `root`."""
    git = GitState(*facts["git"]) if facts["git"] else None
    return SourceTree(root, facts["revision"], facts["kind"], facts["location"],
                      facts["newest_mtime"], git)


def resolve_path_source(root: Path, base: Path) -> SourceTree:
    """A local folder; `base` is the folder its path is written relative to (the matrix's)."""
    location = os.path.relpath(root, base.resolve()) if root.is_absolute() else str(root)
    digest, newest = _scan_tree(root)
    return SourceTree(root, digest, "path", Path(location).as_posix(), newest, _git_state(root))


def _git_state(root: Path) -> GitState | None:
    """The git facts of a folder inside a work tree; None outside one or without git."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
        except OSError:
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    last = git("log", "-1", "--format=%H %ct", "--", ".")
    if not last:
        return None
    commit, time = last.split()
    status = git("status", "--porcelain", "--untracked-files=all", "--ignored=no", "--", ".")
    return GitState(commit, status is None or status != "", int(time))


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
    return _scan_tree(root)[0]


def _scan_tree(root: Path) -> tuple[str, int]:
    """The tree's digest and its newest modification time, in one pass over its files."""
    digest = hashlib.sha256()
    newest = 0
    for relative in source_files(root):
        path = root / relative
        info = path.lstat()
        newest = max(newest, int(info.st_mtime))
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
    return digest.hexdigest(), newest
