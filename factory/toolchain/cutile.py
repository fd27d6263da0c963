"""The Tile IR assembler (tileiras) a cuTile build compiles with.

cuda-tile's `tileiras` extra pulls CUDA 13.2-13.4's nvcc, nvvm and tileiras wheels, which no
environment of a torch that pins an older CUDA 13 (torch 2.11's cuda-toolkit==13.0.2) can hold.
So the assembler lives apart: the extra's wheels installed with uv into a folder of the
factory's cache, whose bin folder (tileiras beside the ptxas it drives) goes first on the PATH
of the build's export step, where cuTile finds it. Nothing of it is imported.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from packaging.requirements import Requirement

from .. import defaults
from ..errors import BuildError
from ..system.cache import exclusive
from ..system.process import Log, ProcessError, bounded_run
from ..system.uv import install_into

__all__ = ["assembler_facts", "provide_assembler"]

_MARKER = "assembler.json"


def provide_assembler(requirement: str, cache: Path, log: Log, offline: bool = False,
                      create: bool = True) -> Path:
    """The bin folder holding the tileiras that `requirement` (the project's cuda-tile
    requirement) brings with its tileiras extra; made on first use (with `create` false it
    must exist already)."""
    wanted = Requirement(requirement)
    wanted.extras = {"tileiras"}
    digest = hashlib.sha256(str(wanted).encode()).hexdigest()[:16]
    target = cache / "cutile" / f"tileiras-{digest}"
    marker = target / _MARKER
    if create:
        with exclusive(target):
            if not marker.is_file():
                install_into(target, [str(wanted)], cache, log, offline,
                             f"installing the Tile IR assembler of {wanted}",
                             "installing cuTile's assembler")
                found = sorted(target.glob("nvidia/cu*/bin/tileiras"))
                if not found:
                    raise BuildError(f"{wanted} installed no tileiras into {target}")
                marker.write_text(json.dumps({"bin": str(found[-1].parent.relative_to(target))}))
    elif not marker.is_file():
        raise BuildError(f"the Tile IR assembler was not prepared ({target} is missing)")
    folder: str = json.loads(marker.read_text())["bin"]
    return target / folder


def assembler_facts(folder: Path) -> tuple[str, list[str]]:
    """The tileiras in `folder` (the one cuTile finds first on PATH): its version line and the
    SMs it compiles for, as it says itself."""
    tileiras = folder / "tileiras"
    try:
        version = bounded_run([tileiras, "--version"], defaults.TOOL_TIMEOUT)
        helped = bounded_run([tileiras, "--help"], defaults.TOOL_TIMEOUT)
    except ProcessError as exc:
        raise BuildError(f"the Tile IR assembler cannot be asked what it is ({exc})") from None
    lines = version.stdout.strip().splitlines()
    line = next((text for text in lines if "release" in text), lines[-1] if lines else "")
    sms = sorted(set(re.findall(r"=\s*(sm_\d+)\b", helped.stdout)), key=lambda sm: int(sm[3:]))
    return line.strip(), sms
