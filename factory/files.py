"""Files as the factory writes and describes them: one sha256 helper, one way to replace a file
atomically, one table of content types.

A file replaced atomically is written beside its target (same file system, so the rename is
atomic) under a hidden name ending in .tmp, which `factory index` clears away after an
interrupted update: a reader sees the old bytes or the new ones, never a part.
"""

from __future__ import annotations

import hashlib
import mimetypes
import os
import shutil
import threading
from pathlib import Path, PurePosixPath

__all__ = ["CONTENT_TYPES", "ZIP_EPOCH", "content_type", "copy_atomic", "file_sha256",
           "write_atomic"]

# The earliest time a zip entry can hold (1980-01-01): a file's timestamp of last resort.
ZIP_EPOCH = 315532800

CONTENT_TYPES = {
    ".whl": "application/zip",
    ".metadata": "text/plain; charset=utf-8",
    ".html": "text/html; charset=utf-8",
    ".json": "application/json",
    ".css": "text/css",
    ".js": "text/javascript",
}


def file_sha256(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def content_type(name: str) -> str:
    """The Content-Type a file of the index is served and uploaded with."""
    suffix = PurePosixPath(name).suffix
    return CONTENT_TYPES.get(suffix) or mimetypes.guess_type(name)[0] or \
        "application/octet-stream"


def _temporary(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")


def write_atomic(path: Path, data: bytes | str) -> None:
    temporary = _temporary(path)
    temporary.write_bytes(data.encode() if isinstance(data, str) else data)
    os.replace(temporary, path)


def copy_atomic(source: Path, destination: Path) -> None:
    temporary = _temporary(destination)
    shutil.copyfile(source, temporary)
    os.replace(temporary, destination)
