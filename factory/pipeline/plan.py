"""`factory plan`: a matrix's cells as jobs for a CI fan-out, each CUDA cell's units and
estimated cost, and the unit shards of cells too long for one job."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..compile.costbook import COSTS_FOLDER, CostBook, known_costs
from ..config.matrix import load_matrix
from ..index.new import listed_wheels, unpublished
from ..plan.costs import cell_work, shard_count
from ..plan.jobs import Job, UnitShard, plan_jobs, unit_shards
from ..plan.model import Plan
from ..plan.select import Selection, select_cells
from .load import plan_matrix
from .names import check_plan_names
from .options import object_folder

__all__ = ["CellCost", "FanOut", "PlanRequest", "new_cells", "plan_fanout"]


@dataclass(frozen=True)
class PlanRequest:
    """What `factory plan` was asked, every path and value already checked."""

    matrix: Path
    cache: Path
    objects: Path | None  # --object-cache: the object cache whose cost book builds wrote
    max_cells: int  # cells per job at most
    offline: bool = False
    locked: bool = False
    torch_pythons: tuple[Path, ...] = ()
    split_after: float | None = None  # seconds: a cell estimated longer is split into shards
    cores: int = 1  # a build machine's cores, for split_after
    new: str | None = None  # an index whose cells are left out (--new)
    select: tuple[Selection, ...] = ()  # --select: the cells a request names


@dataclass(frozen=True)
class CellCost:
    """What compiling one CUDA cell takes, as far as the plan can tell."""

    units: int  # units compiled (not generated or copied)
    core_seconds: float  # their estimated cost
    shards: int  # unit shard jobs it is split into (1: not split)
    widened: dict[str, str]  # sections built beyond the cell's SMs, and why


@dataclass(frozen=True)
class FanOut:
    request: PlanRequest
    plan: Plan
    jobs: list[Job]
    shards: list[UnitShard]
    costs: dict[str, CellCost]  # by cell id, CUDA cells only


def new_cells(plan: Plan, index: str | None, say: Callable[[str], None]) -> Plan:
    """The plan without the cells whose wheels `index` has (all of it when None)."""
    if index is None:
        return plan
    kept, present = unpublished(plan, listed_wheels(index))
    say(f"--new: {len(present)} cell(s) already in {index}, {len(kept.cells)} to build")
    return kept


def plan_fanout(request: PlanRequest, warn: Callable[[str], None]) -> FanOut:
    plan = plan_matrix(load_matrix(request.matrix, list(request.torch_pythons)), request.cache,
                       warn, request.offline, request.locked, every_platform=True)
    check_plan_names(plan, request.cache, request.offline, warn)
    plan = new_cells(select_cells(plan, list(request.select)), request.new, warn)
    jobs = plan_jobs(plan, request.max_cells)
    books = (CostBook(plan.matrix.costs) if plan.matrix.costs else None,
             CostBook(object_folder(request.objects, request.cache) / COSTS_FOLDER))
    costs = {}
    for cell in plan.cells:
        if cell.cuda is None:
            continue
        units, seconds = cell_work(cell, known_costs(cell.spec.name, books))
        shards = 1 if request.split_after is None else \
            shard_count(seconds, request.split_after, request.cores, units)
        costs[cell.id] = CellCost(units, seconds, shards, cell.widened)
    counts = {cell: cost.shards for cell, cost in costs.items()
              if request.split_after is not None}
    return FanOut(request, plan, jobs, unit_shards(plan, jobs, counts), costs)
