"""A build's results as the index records them: one outcome per cell, served cell and skipped
cell of the plan."""

from __future__ import annotations

from collections.abc import Iterable

from ..cells.run import CellResult
from ..index.records import CPU, CellOutcome, public
from ..plan.model import Plan

__all__ = ["cell_outcomes"]


def cell_outcomes(plan: Plan, results: Iterable[CellResult]) -> list[CellOutcome]:
    """What the index records of each cell of a build, for the browse page's coverage grid.
    It is published: every reason is masked as a log line is (a failure's message may quote a
    URL or a value of the environment)."""
    by_id = {result.cell_id: result for result in results}
    outcomes = []
    for cell in plan.cells:
        result = by_id[cell.id]
        outcomes.append(CellOutcome(
            cell.id, cell.distribution, cell.version, cell.torch_shown,
            str(cell.cuda.version) if cell.cuda else cell.backend if cell.compiled else None,
            cell.label, result.status,
            public(result.detail), result.wheel,
            [op.to_json() for op in result.loaded.ops] if result.loaded else None,
            result.tested.to_json() if result.tested else None,
            str(cell.stable_abi) if cell.stable_abi else None))
        # a pure-Python wheel for all, in each CUDA cell it was proven in: that cell's row
        proven = {proof.cell: proof for proof in result.proofs}
        for cell_of in cell.proofs:
            proof = proven.get(cell_of.id)
            assert cell_of.cuda is not None
            outcomes.append(CellOutcome(
                cell_of.id, cell.distribution, cell.version, cell_of.torch_shown,
                str(cell_of.cuda.version), cell_of.label, result.status,
                public(result.detail), result.wheel,
                [op.to_json() for op in proof.loaded.ops] if proof and proof.loaded else None,
                proof.tests.to_json() if proof and proof.tests else None,
                served_by=cell.id))
    for served in plan.served:
        builder = by_id[served.by]
        detail = f"served by the stable-ABI wheel of {served.by}"
        outcomes.append(CellOutcome(
            served.id, plan.distribution(served.id.split("/")[0]), served.version,
            str(served.torch), str(served.cuda), served.label, builder.status,
            public(f"{detail}: {builder.detail}" if builder.detail else detail), builder.wheel,
            served_by=served.by))
    for skipped in plan.skipped:
        kernel = plan.distribution(skipped.id.split("/")[0])
        outcomes.append(CellOutcome(
            skipped.id, kernel, skipped.version or "",
            str(skipped.torch) if skipped.torch else None,
            str(skipped.cuda) if skipped.cuda else CPU if skipped.cpu else None,
            skipped.label, "skipped",
            public(skipped.reason), None))
    return outcomes
