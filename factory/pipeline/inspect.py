"""`factory inspect`: each wheel's report, and the ops it registers as loading it shows (with
an interpreter's torch, now) or as the import gate of the build that made it recorded."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..cells.sandbox import KERNEL_CODE, Confined, gpu_devices, provide_bwrap
from ..cells.state import CellState
from ..errors import FactoryError
from ..index.records import load_manifest
from ..outputs.layout import Layout
from ..prove.load import OpReport, importable_modules, load_problems, load_wheel
from ..system.machine import read_machine
from ..system.process import Log
from ..wheel.expect import recorded_expectation
from ..wheel.gates import check_wheel
from ..wheel.inspect import WheelReport, inspect_wheel
from .options import cache_folder

__all__ = ["Gated", "Inspected", "WheelOps", "gated_digest", "inspect_wheels", "wheel_ops"]


@dataclass(frozen=True)
class WheelOps:
    """The ops a wheel registers, as loading it showed, and where that was seen: loaded now
    with an interpreter's torch, or recorded by the import gate of the build that made it."""

    seen: str
    ops: tuple[OpReport, ...]
    problems: tuple[str, ...] = ()


def wheel_ops(path: Path, report: WheelReport, python: Path | None) -> WheelOps | None:
    """Load the wheel with `python`'s torch, or find what its build's import gate recorded
    (a wheel in the files/ folder of an output folder); None when neither is possible."""
    if python is not None:
        with tempfile.TemporaryDirectory(prefix="kwf-inspect-") as folder, \
                open(Path(folder) / "load.log", "w", encoding="utf-8") as handle:
            log = Log(handle)
            # the wheel's code runs as in a build's import gate: confined, with the GPU
            provide_bwrap(cache_folder(None), log, read_machine(os.environ))
            # absolute (not resolved: a virtual environment's python is a link), since the
            # sandbox starts it from another folder
            loaded = load_wheel(path, importable_modules(report.files), str(python.absolute()),
                                Path(folder) / "load", log,
                                Confined(work=Path(folder) / "load", what=KERNEL_CODE,
                                         devices=gpu_devices()))
        return WheelOps(f"loaded with {python} (torch {loaded.torch})", loaded.ops,
                        tuple(load_problems(loaded)))
    layout = _output_folder(path)
    if layout is None or not layout.manifest.is_file():
        return None
    try:
        manifest = load_manifest(layout.manifest)
    except FactoryError:
        return None
    for outcome in manifest.cells.values():
        if outcome.wheel == path.name and outcome.ops is not None:
            try:
                ops = tuple(OpReport.from_json(op) for op in outcome.ops)
            except (TypeError, KeyError, ValueError):
                return None  # a damaged record: nothing to show
            return WheelOps(f"recorded by the import gate of cell {outcome.cell}", ops)
    return None



def _output_folder(path: Path) -> Layout | None:
    """The output folder whose files/ holds the wheel at `path`, or None."""
    layout = Layout(path.resolve().parent.parent)
    return layout if path.resolve().parent == layout.files else None


@dataclass(frozen=True)
class Gated:
    """The sha256 the build of a wheel's cell took when it packaged the wheel, before any of
    the kernel's code ran (the bytes its gates and tests were run on, and the only ones it
    publishes)."""

    cell: str  # the cell's key
    sha256: str

    def problems(self, sha256: str) -> list[str]:
        if sha256 == self.sha256:
            return []
        return [f"its bytes are not the ones cell {self.cell} gated (sha256 {self.sha256[:12]} "
                f"when it was packaged, {sha256[:12]} now)"]


def gated_digest(path: Path) -> Gated | None:
    """For a wheel in the files/ folder of an output folder, what its cell's record says was
    gated; None for any other wheel."""
    layout = _output_folder(path)
    if layout is None or not layout.state.is_dir():
        return None
    for record in sorted(layout.state.glob("*.json")):
        state = CellState.read(record)
        if state is not None and state.wheel == path.name:
            return Gated(record.stem, state.sha256)
    return None


@dataclass(frozen=True)
class Inspected:
    """One wheel's report, its ops where they can be told, the digest its build gated where
    its cell's record is at hand, and the verdict: the problems the publishing checks, loading
    it and that digest find (none: it passes)."""

    path: Path
    report: WheelReport
    ops: WheelOps | None
    gated: Gated | None
    problems: tuple[str, ...]


def inspect_wheels(paths: list[Path], load_with: Path | None) -> list[Inspected]:
    """Each wheel read and judged, and loaded with `load_with`'s torch when given."""
    found = []
    for path in paths:
        report = inspect_wheel(path)
        ops, gated = wheel_ops(path, report, load_with), gated_digest(path)
        problems = check_wheel(report, recorded_expectation(report))
        problems += list(ops.problems) if ops is not None else []
        problems += gated.problems(report.sha256) if gated is not None else []
        found.append(Inspected(path, report, ops, gated, tuple(problems)))
    return found
