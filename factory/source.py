"""Kernel sources: a folder resolved to a tree and the revision that names its build.

The revision (a git or Hub commit, or a plain folder's content digest) seeds the op namespace
(`_<name>_<7 hex>`), so two builds of different source never register ops under the same name,
and an unchanged tree keeps its name across runs.

A kernel repo is untrusted input: before any of its files is read or copied, every name in it
is checked, and a symlink that leads outside the repo, or a special file, is refused.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError

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
    revision: str  # hex: the resolved commit; a content digest for plain folders
    kind: str  # path | git | hub
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


def source_facts(tree: SourceTree) -> dict:
    """What is known of a source besides its files, for a build that runs elsewhere."""
    git = tree.git
    return {"revision": tree.revision, "kind": tree.kind, "location": tree.location,
            "newest_mtime": tree.newest_mtime,
            "git": [git.commit, git.dirty, git.time] if git else None,
            "digest": tree.digest, "subdir": tree.subdir, "requested": tree.requested}


def source_from_facts(facts: dict, root: Path) -> SourceTree:
    """The source_facts() of a tree whose files are now at `root`."""
    git = GitState(*facts["git"]) if facts["git"] else None
    return SourceTree(root, facts["revision"], facts["kind"], facts["location"],
                      facts["newest_mtime"], git, facts["digest"], facts["subdir"],
                      facts["requested"])


def resolve_path_source(root: Path, base: Path) -> SourceTree:
    """A local folder; `base` is the folder its path is written relative to (the matrix's)."""
    location = os.path.relpath(root, base.resolve()) if root.is_absolute() else str(root)
    digest, newest = scan_tree(root)
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
    """Every file of the tree, relative and sorted, skipping VCS and cache folders. Each name
    and each symlink is checked first (check_entry): an unsafe tree is refused whole."""
    found = []
    real_root = os.path.realpath(root)
    for folder, dirs, files in os.walk(root):
        base = Path(folder)
        links = [d for d in dirs if (base / d).is_symlink()]
        dirs[:] = sorted(d for d in dirs if d not in IGNORED_DIRS and d not in links)
        for name in dirs:
            _check_name(root, (base / name).relative_to(root).as_posix())
        for name in files + links:
            if name.endswith((".pyc", ".pyo")) or name in IGNORED_DIRS:
                continue
            relative = (base / name).relative_to(root)
            check_entry(root, real_root, relative)
            found.append(relative)
    return sorted(found, key=lambda p: p.as_posix())


def unsafe_name(name: str) -> str | None:
    """Why a repo path is refused: it must be plain (relative, no '..' or '.git' part, no
    control characters). None when it is fine."""
    parts = name.split("/")
    if (name.startswith("/") or any(part in ("", ".", "..") for part in parts)
            or any(part.lower() == ".git" for part in parts)
            or any(ord(c) < 32 or ord(c) == 127 for c in name)):
        return f"unsafe file name {name!r} in the kernel repo is refused"
    return None


def _check_name(root: Path, name: str) -> None:
    problem = unsafe_name(name)
    if problem:
        raise ConfigError(problem, file=root)


def check_entry(root: Path, real_root: str, relative: Path) -> None:
    """Refuse special files and symlinks that lead outside the repo (even through other
    links), reading nothing but the link itself."""
    _check_name(root, relative.as_posix())
    path = root / relative
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode):
        target = os.readlink(path)
        resolved = os.path.realpath(path)
        if os.path.isabs(target) or not _inside(resolved, real_root):
            raise ConfigError(f"the symlink {relative.as_posix()} -> {target} leads outside the "
                              "kernel repo; it is refused", file=root)
    elif not stat.S_ISREG(info.st_mode):
        raise ConfigError(f"{relative.as_posix()} is not a regular file, folder or symlink; it "
                          "is refused", file=root)


def link_target_inside(link: str, target: str) -> bool:
    """Whether a symlink at repo path `link` with text `target` stays inside the repo, judged
    by its text alone (for trees not yet on disk): relative, and never above the root."""
    if os.path.isabs(target) or "\0" in target:
        return False
    depth = len(link.split("/")) - 1
    for part in target.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                return False
        elif part not in ("", "."):
            depth += 1
    return True


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


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
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        digest.update(b"\0")
    return digest.hexdigest(), newest
