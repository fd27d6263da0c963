"""Kernel source trees: a folder and the revision that names its build.

The revision (a git or Hub commit, or a plain folder's content digest) seeds the op namespace
(`_<name>_<7 hex>`), so two builds of different source never register ops under the same name,
and an unchanged tree keeps its name across runs. Every file of a tree passes the path-safety
rules (safety.py) before it is read.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from .. import defaults
from ..config.model import SourceKind
from ..errors import ConfigError
from ..outputs.files import ZIP_EPOCH
from ..system.process import ProcessError, bounded_run
from ..trust.safety import check_entry, unsafe_name

__all__ = ["IGNORED_DIRS", "GitState", "SourceTree", "resolve_path_source",
           "scan_tree", "source_files", "tree_digest"]

# Folders that are never part of a kernel's source.
IGNORED_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", ".pytest_cache", ".mypy_cache",
                          ".ruff_cache", ".venv", "result"})

@dataclass(frozen=True)
class GitState:
    commit: str  # the last commit that changed the kernel's folder
    dirty: bool  # the folder has changes no commit holds
    time: int  # that commit's time (seconds since the epoch)


@dataclass(frozen=True)
class SourceTree:
    root: Path
    revision: str  # hex: the resolved commit; a content digest for plain folders
    kind: SourceKind
    location: str  # how the matrix names it: a folder relative to the matrix's, a URL, a repo id
    newest_mtime: int  # the newest file's modification time
    git: GitState | None = None
    digest: str = ""  # tree_digest(root); the revision itself for plain folders
    subdir: str | None = None  # the kernel's folder inside the repository
    requested: str | None = None  # the rev the matrix asked for (a branch, tag or commit)

    def __post_init__(self) -> None:
        if not self.digest:
            object.__setattr__(self, "digest", self.revision)

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

    def to_json(self) -> dict[str, Any]:
        """Everything known of the tree besides its files, for a build that runs elsewhere."""
        git = self.git
        return {"revision": self.revision, "kind": self.kind, "location": self.location,
                "newest_mtime": self.newest_mtime,
                "git": [git.commit, git.dirty, git.time] if git else None,
                "digest": self.digest, "subdir": self.subdir, "requested": self.requested}

    @classmethod
    def from_json(cls, data: dict[str, Any], root: Path) -> SourceTree:
        """The to_json() of a tree whose files are now at `root`."""
        git = GitState(*data["git"]) if data["git"] else None
        return cls(root, data["revision"], cast(SourceKind, data["kind"]), data["location"],
                   data["newest_mtime"], git, data["digest"], data["subdir"], data["requested"])


def resolve_path_source(root: Path) -> SourceTree:
    """A local folder. Its recorded location is its path inside its git work tree
    (examples/img2gray), else its own name: never where the matrix or the machine keeps it, so
    that the same source gives the same wheel wherever matrix.yaml lives."""
    digest, newest = scan_tree(root)
    return SourceTree(root, digest, "path", _location(root), newest, _git_state(root))


def _git(root: Path, *args: str) -> str | None:
    """A git command's output in `root`; None outside a work tree or without git."""
    try:
        done = bounded_run(["git", "-C", str(root), *args], defaults.TOOL_TIMEOUT)
    except ProcessError:
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _location(root: Path) -> str:
    prefix = (_git(root, "rev-parse", "--show-prefix") or "").strip("/")
    return prefix or Path(os.path.realpath(root)).name


def _git_state(root: Path) -> GitState | None:
    """The git facts of a folder inside a work tree; None outside one or without git."""
    last = _git(root, "log", "-1", "--format=%H %ct", "--", ".")
    if not last:
        return None
    commit, time = last.split()
    status = _git(root, "status", "--porcelain", "--untracked-files=all", "--ignored=no", "--", ".")
    return GitState(commit, status is None or status != "", int(time))


def source_files(root: Path) -> list[Path]:
    """Every file of the tree, relative and sorted, skipping VCS and cache folders. Each name
    and each symlink is checked first: an unsafe tree is refused whole."""
    found = []
    real_root = os.path.realpath(root)
    for folder, dirs, files in os.walk(root):
        base = Path(folder)
        links = [d for d in dirs if (base / d).is_symlink()]
        dirs[:] = sorted(d for d in dirs if d not in IGNORED_DIRS and d not in links)
        for name in dirs:
            problem = unsafe_name((base / name).relative_to(root).as_posix())
            if problem:
                raise ConfigError(problem, file=root)
        for name in files + links:
            if name.endswith((".pyc", ".pyo")) or name in IGNORED_DIRS:
                continue
            relative = (base / name).relative_to(root)
            check_entry(root, real_root, relative)
            found.append(relative)
    return sorted(found, key=lambda p: p.as_posix())


def tree_digest(root: Path) -> str:
    """sha256 over the tree's paths, executable bits, symlink targets and contents."""
    return scan_tree(root)[0]


def scan_tree(root: Path) -> tuple[str, int]:
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
            hashlib.file_digest(handle, lambda: digest)  # the file's bytes, into the tree's digest
        digest.update(b"\0")
    return digest.hexdigest(), newest
