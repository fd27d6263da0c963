"""What a wheel promises by its own records, for `factory inspect`: the cell its provenance
names (a wheel without one can only be checked against what it says of itself)."""

from __future__ import annotations

from .gates import Expectation
from .inspect import WheelReport

__all__ = ["recorded_expectation"]


def recorded_expectation(report: WheelReport) -> Expectation:
    record = report.record
    arch = next((so.arch for so in report.shared_objects if so.arch), None)
    if record is None or not record.cell:
        return Expectation(report.name, report.version, None, None, None, arch)
    cell = record.cell
    torch = cell.get("torch")
    cuda = cell.get("cuda")
    if cell.get("cutile"):
        return Expectation(record.kernel.name, report.version,
                           cell.get("torch_pin") or (f"=={torch}.*" if torch else "any"),
                           int(str(cuda).split(".")[0]) if cuda else None, None, None,
                           cubins=frozenset(cell.get("gpu_code", [])))
    return Expectation(
        record.kernel.name, report.version,
        cell.get("torch_pin") or (f"=={torch}.*" if torch else "any"),
        int(str(cuda).split(".")[0]) if cuda else None,
        frozenset(cell.get("gpu_code", [])), cell.get("platform") if torch else None,
        gpu_covers=cell.get("project") == "pep517", stable_abi=cell.get("stable_abi"),
    )
