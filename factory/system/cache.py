"""The factory's cache folder (toolkits, torch environments and fetched sources live there, not
in the user's repo; pipeline/options.py settles where): the locks its builds take turns by."""

from __future__ import annotations

import fcntl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["exclusive"]

_thread_locks: dict[str, threading.Lock] = {}
_thread_locks_guard = threading.Lock()


@contextmanager
def exclusive(path: Path) -> Iterator[None]:
    """Hold `path.lock` against other threads and other factory processes."""
    lock_path = path.with_name(path.name + ".lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with _thread_locks_guard:
        thread_lock = _thread_locks.setdefault(str(lock_path), threading.Lock())
    with thread_lock, open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
