"""CPython interpreters for the cells of PEP 517 projects, which are built per Python version.

The factory's own interpreter serves its own version. Any other comes from uv: one the machine
has (uv looks on PATH and in its own managed installs), or one uv installs into the factory's
cache. A builder container finds its interpreters where manylinux images keep them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ..errors import BuildError
from ..system.process import Log
from ..system.uv import uv_bin, uv_env
from ..values.versions import Version

__all__ = ["MANYLINUX_PYTHONS", "find_python", "manylinux_python"]

MANYLINUX_PYTHONS = Path("/opt/python")


def manylinux_python(version: Version) -> Path:
    """Where a manylinux image (and the factory's Debian bases) keeps CPython X.Y."""
    tag = f"cp{version.major}{version.minor}"
    return MANYLINUX_PYTHONS / f"{tag}-{tag}" / "bin" / "python"


def find_python(version: Version, cache: Path, log: Log, offline: bool = False) -> Path:
    """An interpreter of CPython `version` (major.minor) on this machine, installed by uv into
    the cache when the machine has none (not when `offline`)."""
    if sys.version_info[:2] == (version.major, version.minor):
        return Path(sys.executable)
    wanted = f"cpython@{version.major}.{version.minor}"
    env = {**uv_env(cache, offline), "UV_PYTHON_INSTALL_DIR": str(cache / "python")}
    found = _uv_python(["find", "--no-project", wanted], env)
    if found.returncode == 0:
        return Path(found.stdout.strip())
    if offline:
        raise BuildError(f"no CPython {version} on this machine (offline, so uv does not "
                         "install one); install it, or leave it out of the matrix's python:")
    log.step(f"installing CPython {version} with uv into {cache / 'python'}")
    installed = _uv_python(["install", wanted], env)
    found = _uv_python(["find", "--no-project", wanted], env)
    if installed.returncode != 0 or found.returncode != 0:
        lines = (installed.stderr or installed.stdout).strip().splitlines()
        raise BuildError(f"no CPython {version} on this machine, and uv could not install one "
                         f"({lines[-1].strip() if lines else 'no output'})")
    return Path(found.stdout.strip())


def _uv_python(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([uv_bin(), "python", *args], capture_output=True, text=True,
                          env={**os.environ, **env})
