"""The path-safety rules, in one place.

A kernel repo is untrusted input: before any of its files is read or copied, every name in it
is checked, and a symlink that leads outside the repo, or a special file, is refused. Paths a
build.toml or matrix.yaml names must stay inside the repo. The server answers only for plain
paths under the folder it serves.
"""

from __future__ import annotations

import os
import posixpath
import stat
from pathlib import Path, PurePosixPath

from ..errors import ConfigError

__all__ = [
    "check_entry",
    "is_inside",
    "leaves_root",
    "link_target_inside",
    "served_parts",
    "unsafe_name",
]


def unsafe_name(name: str) -> str | None:
    """Why a repo path is refused: it must be plain (relative, no '..' or '.git' part, no
    control characters). None when it is fine."""
    parts = name.split("/")
    if (name.startswith("/") or any(part in ("", ".", "..") for part in parts)
            or any(part.lower() == ".git" for part in parts)
            or any(ord(c) < 32 or ord(c) == 127 for c in name)):
        return f"unsafe file name {name!r} in the kernel repo is refused"
    return None


def leaves_root(text: str) -> bool:
    """Whether a path written in a config file (a build.toml src, a matrix subdir) could leave
    the folder it is relative to: an absolute path, or one with a '..' part."""
    path = PurePosixPath(text)
    return path.is_absolute() or ".." in path.parts


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


def is_inside(path: str, root: str) -> bool:
    """Whether a resolved path is `root` or under it."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def check_entry(root: Path, real_root: str, relative: Path) -> None:
    """Refuse an unsafe name, a special file, or a symlink that leads outside the repo (even
    through other links), reading nothing but the link itself."""
    problem = unsafe_name(relative.as_posix())
    if problem:
        raise ConfigError(problem, file=root)
    path = root / relative
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode):
        target = os.readlink(path)
        if os.path.isabs(target) or not is_inside(os.path.realpath(path), real_root):
            raise ConfigError(f"the symlink {relative.as_posix()} -> {target} leads outside "
                                "the kernel repo; it is refused", file=root)
    elif not stat.S_ISREG(info.st_mode):
        raise ConfigError(f"{relative.as_posix()} is not a regular file, folder or symlink; "
                            "it is refused", file=root)


def served_parts(url_path: str) -> list[str] | None:
    """The path segments a server may look up for a decoded URL path, or None: a segment that
    is '.', '..' or hidden (such as .factory/) is never served."""
    parts = [part for part in posixpath.normpath(url_path).split("/") if part]
    if any(part in ("..", ".") or part.startswith(".") for part in parts):
        return None
    return parts
