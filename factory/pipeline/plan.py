"""`factory plan`: a matrix's cells as jobs for a CI fan-out, each CUDA cell's units and
estimated cost, and the unit shards of cells too long for one job."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..cells.broker import holdings_of
from ..compile.costbook import COSTS_FOLDER, CostBook, known_costs
from ..compile.held import held_units, read_local
from ..compile.objects import object_path, store_parts
from ..compile.remote import remote_store
from ..config.matrix import load_matrix
from ..index.new import listed_wheels, unpublished
from ..plan.costs import cell_work, shard_count
from ..plan.jobs import Job, UnitShard, plan_jobs, unit_shards
from ..plan.model import Cell, Plan
from ..plan.select import Selection, select_cells
from ..trust.keys import existing_key
from .load import plan_matrix
from .names import check_plan_names
from .options import object_folder, object_key, object_store

__all__ = ["CellCost", "FanOut", "Held", "Holdings", "PlanRequest", "new_cells", "plan_fanout"]


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
    object_store: str | None = None  # --object-store: the remote object store's URL


@dataclass(frozen=True)
class CellCost:
    """What compiling one CUDA cell takes, as far as the plan can tell."""

    units: int  # units compiled (not generated or copied)
    core_seconds: float  # their estimated cost
    shards: int  # unit shard jobs it is split into (1: not split)
    widened: dict[str, str]  # sections built beyond the cell's SMs, and why
    held: Held  # the units whose objects the object cache or the store holds
    left: tuple[int, float]  # the units not held, and their estimated cost


@dataclass(frozen=True)
class Held:
    """The units of a cell whose objects are held: by this machine's object cache, by the
    remote object store."""

    cache: frozenset[str] = frozenset()
    store: frozenset[str] = frozenset()

    @property
    def units(self) -> frozenset[str]:
        return self.cache | self.store


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
    matrix = load_matrix(request.matrix, list(request.torch_pythons))
    plan = plan_matrix(matrix, request.cache, warn, request.offline, request.locked,
                       every_platform=True)
    check_plan_names(plan, request.cache, request.offline, warn)
    plan = new_cells(select_cells(plan, list(request.select)), request.new, warn)
    jobs = plan_jobs(plan, request.max_cells)
    objects = object_folder(request.objects, request.cache)
    books = (CostBook(plan.matrix.costs) if plan.matrix.costs else None,
             CostBook(objects / COSTS_FOLDER))
    holdings = Holdings(objects, object_store(request.object_store, matrix), warn)
    costs = {}
    for cell in plan.cells:
        if cell.cuda is None:
            continue
        book = known_costs(cell.spec.name, books)
        held = holdings.of(cell)
        units, seconds = cell_work(cell, book)
        left = cell_work(cell, book, held.units)
        shards = 1 if request.split_after is None else \
            shard_count(left[1], request.split_after, request.cores, left[0])
        costs[cell.id] = CellCost(units, seconds, shards, cell.widened, held, left)
        holdings.say(cell, held, units)
    counts = {cell: cost.shards for cell, cost in costs.items()
              if request.split_after is not None}
    return FanOut(request, plan, jobs, unit_shards(plan, jobs, counts), costs)


class Holdings:
    """Which units of each cell the object cache and the remote store hold (compile/held.py),
    checked under the object cache's key; with no key on this machine, none."""

    def __init__(self, objects: Path, store: tuple[str, str] | None,
                 warn: Callable[[str], None]) -> None:
        self.parts = store_parts(objects)
        self.key = existing_key(object_key())
        self.store = remote_store(*store, warn) if store and self.key else None
        self.warn = warn
        self.hashes: dict[Path, str | None] = {}  # source files hashed, for every cell

    def of(self, cell: Cell) -> Held:
        if self.key is None:
            return Held()
        name, root, namespace = holdings_of(cell), cell.spec.root, cell.ops_namespace
        cache: set[str] = set()
        for part in self.parts:
            def present(obj: str, part: Path = part) -> bool:
                return object_path(part, obj).is_file()

            cache |= held_units(self.key, name, read_local(part, name), root, namespace,
                                present, self.hashes)
        store = held_units(self.key, name, self.store.holdings(name), root, namespace,
                           hashes=self.hashes) if self.store else set()
        return Held(frozenset(cache), frozenset(store))

    def say(self, cell: Cell, held: Held, units: int) -> None:
        """One line for a cell some of whose units are held."""
        if not held.units:
            return
        where = [f"the object cache {len(held.cache)}"] if held.cache else []
        if self.store and held.store:
            where.append(f"the object store {self.store.description} {len(held.store)}")
        total = max(units, len(held.units))
        self.warn(f"{cell.id}: {len(held.units)} of {total} unit(s) held ("
                  + ", ".join(where) + "); the plan leaves them out of what is left to compile")
