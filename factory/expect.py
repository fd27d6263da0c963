"""What a cell's wheel must be, for the gates: from the plan when building, and from a wheel's
own provenance record when inspecting a wheel later."""

from __future__ import annotations

from .compile.commands import cuda_archs
from .matrix.plan import Cell
from .wheel.fatbin import FatbinEntry
from .wheel.gates import Expectation
from .wheel.inspect import WheelReport


def expected_gpu_code(cell: Cell) -> set[FatbinEntry]:
    """The SASS and PTX entries the plan promises for the cell's shared object."""
    expected: set[FatbinEntry] = set()
    for cap in cuda_archs(cell):
        sm = cap.major * 10 + cap.minor
        expected.add(FatbinEntry("sass", sm, cap.variant))
        if cap.ptx:
            expected.add(FatbinEntry("ptx", sm, cap.variant))
    return expected


def cell_expectation(cell: Cell) -> Expectation:
    if cell.label is None:
        return Expectation(cell.spec.name, cell.wheel_version, "any", None, frozenset(), None)
    return Expectation(
        cell.spec.name, cell.wheel_version, f"=={cell.torch.major_minor()}.*",
        cell.cuda.version.major, frozenset(str(entry) for entry in expected_gpu_code(cell)),
        cell.platform,
    )


def recorded_expectation(report: WheelReport) -> Expectation:
    """The promises a wheel's provenance makes; without one, only what the wheel says of
    itself can be checked."""
    record = report.provenance or {}
    cell = record.get("cell") if isinstance(record.get("cell"), dict) else {}
    arch = next((so.arch for so in report.shared_objects if so.arch), None)
    if not cell:
        return Expectation(report.name, report.version, None, None, None, arch)
    torch = cell.get("torch")
    cuda = cell.get("cuda")
    return Expectation(
        record.get("kernel", {}).get("name", report.name), report.version,
        f"=={torch}.*" if torch else "any",
        int(str(cuda).split(".")[0]) if cuda else None,
        frozenset(cell.get("gpu_code", [])), cell.get("platform") if torch else None,
    )
