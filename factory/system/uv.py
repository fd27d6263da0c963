"""uv, the installer behind every environment and toolkit the factory makes."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from .. import defaults
from .process import Log, run

__all__ = ["install_into", "uv_bin", "uv_env"]


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


def install_into(target: Path, requirements: list[str], cache: Path, log: Log, offline: bool,
                 title: str, what: str) -> None:
    """`requirements` installed by uv into the folder `target`, made afresh: tools shipped as
    wheels (a CUDA toolkit, cuTile's assembler) that no interpreter imports."""
    log.step(f"{title} into {target}" + (" (offline: from uv's cache only)" if offline else ""))
    if target.exists():
        shutil.rmtree(target)
    run([uv_bin(), "pip", "install", "--quiet", "--target", target, *requirements], log,
        timeout=defaults.STEP_TIMEOUT,
        env=uv_env(cache, offline), what=what)
