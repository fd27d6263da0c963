"""Plan one cell again from its record (provenance.cell_record): how `factory verify` rebuilds a
wheel, and how a builder container learns which cell to build."""

from __future__ import annotations

from pathlib import Path

from .errors import ConfigError
from .matrix.model import DEFAULT_LABEL, CudaEntry, KernelEntry, Matrix
from .matrix.plan import Cell, Kernel, make_plan
from .source import SourceTree
from .spec.buildtoml import read_build_toml
from .versions import Version


def replan_cell(record: dict, version: str, tree: SourceTree, origin: Path,
                cuda_home: Path | None = None) -> Cell:
    """The cell `record` describes, for the kernel at tree.root. `origin` names what the record
    came from in errors; `cuda_home` replaces the recorded toolkit folder."""
    spec = read_build_toml(tree.root)
    entry = KernelEntry.local(tree.root, version)
    cudas: tuple[CudaEntry, ...] = ()
    torches: tuple[Version, ...] = ()
    if record.get("torch"):
        home = cuda_home or (Path(record["cuda_home"]) if record.get("cuda_home") else None)
        torches = (Version.parse(record["torch"]),)
        cudas = (CudaEntry(Version.parse(record["cuda"]),
                           tuple(Version.parse(sm) for sm in record["sms"]), bool(record["ptx"]),
                           home, record.get("torch_index"), None),)
    matrix = Matrix(origin, (entry,), torches, cudas, (record["platform"],) if torches else (),
                    record.get("label_template") or DEFAULT_LABEL, None, ())
    plan = make_plan(matrix, [Kernel(entry, tree, spec, version)], record["platform"])
    for planned in plan.cells:
        if planned.id == record["id"]:
            return planned
    reasons = "; ".join(f"{s.id}: {s.reason}" for s in plan.skipped)
    raise ConfigError(f"cell {record['id']} cannot be planned again here"
                      f"{': ' + reasons if reasons else ''}", file=origin)
