"""The factory's cache folder: toolkits, torch environments and fetched sources live here, not
in the user's repo. Override with --cache-dir or KERNEL_WHEEL_FACTORY_CACHE."""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .. import defaults

__all__ = ["default_cache_dir", "exclusive"]

_thread_locks: dict[str, threading.Lock] = {}
_thread_locks_guard = threading.Lock()


def default_cache_dir() -> Path:
    explicit = os.environ.get(defaults.CACHE_VARIABLE)
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / defaults.CACHE_FOLDER


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
