"""uv, the installer behind every environment and toolkit the factory makes."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["uv_bin", "uv_env"]


def uv_bin() -> str:
    from uv import find_uv_bin

    return find_uv_bin()


def uv_env(cache: Path) -> dict[str, str]:
    """uv's own cache: the user's where they set one, else inside the factory's cache (the same
    file system as the environments, so installs are hard links rather than copies)."""
    if "UV_CACHE_DIR" in os.environ:
        return {}
    return {"UV_CACHE_DIR": str(cache / "uv")}
