"""`factory verify WHEEL`: rebuild a wheel from its provenance and compare the bytes."""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path

from ..cells.options import usable_build_root
from ..cells.verify import Verdict, verify_wheel
from ..system.machine import read_machine
from .options import verify_build_root

__all__ = ["Verdict", "verify"]


def verify(wheel: Path, source: Path | None, cache: Path, build_root: Path | None) -> Verdict:
    """The verdict on `wheel` rebuilt from `source` (else where its provenance says), in
    `build_root` (else the recorded build folder)."""
    given = usable_build_root(build_root) if build_root is not None else None
    return verify_wheel(wheel, source, cache, partial(verify_build_root, given),
                        read_machine(os.environ))
