"""--select: the cells a request names by their fields (kernel, torch, CUDA, Python,
platform), as a workflow's run form asks for them, applied to a plan before --new leaves out
what an index has and before the plan is split into jobs, so `factory plan` and every build job
of the fan-out see the same cells: a request for cells already published builds nothing.

A selection is `field=GLOB` pairs joined by commas (kernel=img2gray,torch=2.11,cuda=13.*); a
cell is kept when it matches every pair of one selection. A cell that serves every CPython
(abi3) matches any python=; `kernel=` matches the kernel's name or its distribution's.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass

from ..errors import ConfigError
from ..values.versions import major_minor
from .model import Plan

__all__ = ["SELECT_FIELDS", "Selection", "parse_selection", "select_cells"]

SELECT_FIELDS = ("kernel", "torch", "cuda", "python", "platform")
_PAIR = re.compile(r"([a-z]+)=([A-Za-z0-9_.*?\[\]!+-]+)")


@dataclass(frozen=True)
class Selection:
    """One --select: a glob per field it names."""

    text: str
    globs: tuple[tuple[str, str], ...]

    def matches(self, fields: dict[str, tuple[str, ...] | None]) -> bool:
        """Whether a cell with these field values matches (a field's values: any may match;
        None: the cell serves every value of it)."""
        for name, glob in self.globs:
            values = fields.get(name)
            if values is not None and \
                    not any(fnmatch.fnmatchcase(value, glob) for value in values):
                return False
        return True


def parse_selection(text: str) -> Selection:
    globs = []
    for part in text.split(","):
        pair = _PAIR.fullmatch(part.strip())
        if pair is None:
            raise ConfigError(f"'{part.strip()}' is not field=GLOB (e.g. torch=2.11; fields: "
                              f"{', '.join(SELECT_FIELDS)})", key="--select")
        if pair[1] not in SELECT_FIELDS:
            raise ConfigError(f"unknown field '{pair[1]}' (fields: {', '.join(SELECT_FIELDS)})",
                              key="--select")
        globs.append((pair[1], pair[2]))
    names = [name for name, _ in globs]
    if len(set(names)) != len(names):
        raise ConfigError(f"'{text}' names a field twice", key="--select")
    return Selection(text, tuple(globs))


def select_cells(plan: Plan, selections: list[Selection]) -> Plan:
    """The cells (built, served or skipped) of the plan one of the selections matches; a
    stable-ABI cell is kept when a cell it serves matches. None matching is an error."""
    if not selections:
        return plan

    def kept(fields: dict[str, tuple[str, ...] | None]) -> bool:
        return any(selection.matches(fields) for selection in selections)

    def names(kernel: str) -> tuple[str, ...]:
        return kernel, plan.distribution(kernel)

    cells = {cell.id for cell in plan.cells if kept({
        "kernel": names(cell.spec.name),
        "torch": (str(major_minor(cell.torch)),) if cell.torch else None,
        "cuda": (str(major_minor(cell.cuda.version)),) if cell.cuda else None,
        "python": (str(cell.python),) if cell.per_python and cell.python else None,
        "platform": (cell.platform,) if cell.platform != "any" else None})}
    cells |= {served.by for served in plan.served if kept({
        "kernel": names(served.id.split("/")[0]), "torch": (str(major_minor(served.torch)),),
        "cuda": (str(major_minor(served.cuda)),), "python": None,
        "platform": (served.platform,)})}
    skipped = {skipped.id for skipped in plan.skipped if kept({
        "kernel": names(skipped.id.split("/")[0]),
        "torch": (str(major_minor(skipped.torch)),) if skipped.torch else None,
        "cuda": (str(major_minor(skipped.cuda)),) if skipped.cuda else None,
        "python": _python_of(skipped.id), "platform": _platform_of(skipped.id)})}
    if not cells and not skipped:
        raise ConfigError(f"{' or '.join(repr(s.text) for s in selections)} matches no cell of "
                          f"the matrix", key="--select")
    return plan.select(cells | skipped)


def _platform_of(cell_id: str) -> tuple[str, ...] | None:
    parts = cell_id.split("/")
    return (parts[2],) if len(parts) > 2 else None


def _python_of(cell_id: str) -> tuple[str, ...] | None:
    parts = cell_id.split("/")
    if len(parts) > 3 and re.fullmatch(r"cp3\d+", parts[3]):
        return (f"3.{parts[3][3:]}",)
    return None
