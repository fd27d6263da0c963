"""uv, the installer behind every environment and toolkit the factory makes."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["uv_bin", "uv_env"]


def uv_bin() -> str:
    from uv import find_uv_bin

    return find_uv_bin()


def uv_env(cache: Path, offline: bool = False) -> dict[str, str]:
    """uv's own cache: the user's where they set one, else inside the factory's cache (the same
    file system as the environments, so installs are hard links rather than copies).
    `offline`: uv installs only what its cache holds and never opens a connection."""
    env = {"UV_OFFLINE": "1"} if offline else {}
    if "UV_CACHE_DIR" not in os.environ:
        env["UV_CACHE_DIR"] = str(cache / "uv")
    return env
