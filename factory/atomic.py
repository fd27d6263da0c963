"""Files replaced in one step: a reader sees the old bytes or the new ones, never a part.

The temporary file sits beside its target (same file system, so the rename is atomic) under a
hidden name ending in .tmp, which `factory index` clears away after an interrupted update.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path


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
