"""Files as the factory writes and describes them: one sha256 helper, one way to replace a file
atomically, one table of content types.

A file replaced atomically is written beside its target (same file system, so the rename is
atomic) under a hidden name ending in .tmp, which `factory index` clears away after an
interrupted update: a reader sees the old bytes or the new ones, never a part.
"""

from __future__ import annotations

import hashlib
import json
import mimetypes
import os
import re
import shutil
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Any

__all__ = ["CONTENT_TYPES", "ZIP_EPOCH", "atomic_target", "content_type", "copy_atomic",
           "file_sha256", "process_alive", "read_regular", "read_small_json",
           "remove_abandoned_temporaries", "write_atomic"]

# The earliest time a zip entry can hold (1980-01-01): a file's timestamp of last resort.
ZIP_EPOCH = 315532800

CONTENT_TYPES = {
    ".whl": "application/zip",
    ".metadata": "text/plain; charset=utf-8",
    ".html": "text/html; charset=utf-8",
    ".json": "application/json",
    ".css": "text/css",
    ".js": "text/javascript",
    ".svg": "image/svg+xml",
}


def file_sha256(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def read_small_json(path: Path, limit: int) -> Any:
    """The JSON of a small record that may come from elsewhere (an imported object cache or
    cost book, a publish-journal note); None for anything else: not a regular file (a FIFO
    would block the read forever, a link lead elsewhere), over `limit` bytes, not JSON, nested
    too deep."""
    try:
        data = read_regular(path, limit)
        return None if data is None else json.loads(data)
    except (OSError, ValueError, RecursionError):
        return None


def read_regular(path: Path, limit: int, follow: bool = False) -> bytes | None:
    """The bytes of `path` when it is a regular file (not a link unless `follow`, not a FIFO or
    a device) of at most `limit` bytes, else None; what is checked is the file that is read
    (opened without blocking, then looked at)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    descriptor = os.open(path, flags)
    with os.fdopen(descriptor, "rb") as handle:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        data = handle.read(limit + 1)
    return data if len(data) <= limit else None


def content_type(name: str) -> str:
    """The Content-Type a file of the index is served and uploaded with."""
    suffix = PurePosixPath(name).suffix
    return CONTENT_TYPES.get(suffix) or mimetypes.guess_type(name)[0] or \
        "application/octet-stream"


def _temporary(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")


_TEMPORARY = re.compile(r"\..+\.(?P<pid>\d+)\.\d+\.tmp")


@contextmanager
def atomic_target(path: Path) -> Iterator[Path]:
    """A temporary path beside `path` to write to; renamed to `path` when the block ends, and
    removed instead when it fails."""
    temporary = _temporary(path)
    try:
        yield temporary
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def write_atomic(path: Path, data: bytes | str) -> None:
    with atomic_target(path) as temporary:
        temporary.write_bytes(data.encode() if isinstance(data, str) else data)


def copy_atomic(source: Path, destination: Path) -> None:
    with atomic_target(destination) as temporary:
        shutil.copyfile(source, temporary)


def process_alive(pid: int) -> bool:
    """Whether a process with this id runs (one of another user counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_abandoned_temporaries(root: Path) -> int:
    """Remove the temporaries of atomic writes under `root` whose process is gone (a killed
    run's); those of a live process are another run's work in progress. Links are not
    followed. How many were removed."""
    removed = 0
    for folder, _subfolders, names in os.walk(root, followlinks=False):
        for name in names:
            match = _TEMPORARY.fullmatch(name)
            if match and not process_alive(int(match.group("pid"))):
                path = Path(folder) / name
                if path.is_file() and not path.is_symlink():
                    path.unlink(missing_ok=True)
                    removed += 1
    return removed
