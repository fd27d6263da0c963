"""Where each cell of a plan is built, decided once, with the reason: its placement.

The rule (`candidates`) is the only place a placement is worked out from a cell: a cell whose
torch lives in an image is built in a container of that image; a cross-compiled cell and a CPU
cell on this machine (the builder images are CUDA toolkits of one platform, with no cross
compiler or emulator); a cell whose torch is an interpreter of this machine, or with nothing
to compile, on this machine. Any other compiled cell goes to the factory's builder container
when the runner asked for is docker, or auto and a runner can take it, else to this machine.
`place` is handed the places this run has (which runners can take which placements, from
cells/runners/), never a docker flag, and gives a `PlacedPlan`: a plan whose cells each carry
their placement. So one matrix may build some cells in containers and others here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from ..config.model import RunnerChoice
from ..errors import ConfigError
from .model import Cell, Placement, Plan

__all__ = ["Places", "PlacedPlan", "candidates", "needs_containers", "place"]


@dataclass(frozen=True)
class Places:
    """Where this run can build: the runner asked for, each placement no runner can take now
    with why (docker does not answer, say), and what the runners said of themselves (docker's
    version, the containers of an interrupted run they removed)."""

    requested: RunnerChoice
    closed: Mapping[Placement, str] = field(default_factory=dict)
    said: str = ""


@dataclass(frozen=True)
class PlacedPlan(Plan):
    """A plan whose every cell carries its placement, with where they go and why in a line:
    what the runners build from (a plan of unplaced cells is a Plan)."""

    why: str = ""


def candidates(cell: Cell, requested: RunnerChoice) -> tuple[Placement, ...]:
    """The placements that can build the cell with the runner asked for, preferred first;
    a placement the request rules out is one line of bad input."""
    if cell.installed is not None and cell.installed.image is not None:
        if requested == "local":
            raise ConfigError(f"{cell.installed.describe()} lives in an image: build it with "
                              "the docker runner (--runner docker or auto)", key="runner")
        return ("image",)
    if cell.cross or cell.backend == "cpu":
        if requested == "docker":
            what = (f"{cell.id} is cross-compiled (cross: true)" if cell.cross
                    else f"{cell.id} is a CPU cell")
            raise ConfigError(f"{what}, which only the local runner builds: build it with "
                              "--runner local (or auto)", key="runner")
        return ("cross",) if cell.cross else ("cpu",)
    if cell.installed is not None or cell.cuda is None:
        return ("host",)
    return _COMPILED[requested]


# Where a compiled cell that any machine with the toolkit can build goes, by the runner asked for.
_COMPILED: dict[RunnerChoice, tuple[Placement, ...]] = {
    "local": ("host",), "docker": ("builder",), "auto": ("builder", "host")}


def _ties_here(cell: Cell) -> bool:
    """A compiled cell no container can build: it keeps the run on this machine."""
    return cell.compiled and not {"builder", "image"} & set(candidates(cell, "auto"))


def needs_containers(plan: Plan, requested: RunnerChoice) -> bool:
    """Whether placing the plan's cells asks whether containers can be used: for a cell that
    only a container builds or that the builder container could take, and, where no cell ties
    the run to this machine (cross-compiled, CPU, or with an installed torch), for the run's
    runner itself (docker then also removes what an interrupted run left)."""
    wanted = {placement for cell in plan.cells for placement in candidates(cell, requested)}
    if wanted & {"builder", "image"}:
        return True
    return requested != "local" and not any(_ties_here(cell) for cell in plan.cells)


def place(plan: Plan, places: Places) -> PlacedPlan:
    """The plan with each cell's placement: the first of its candidates that a runner of this
    run can take; a cell none can take is bad input, naming why."""
    cells = []
    for cell in plan.cells:
        wanted = candidates(cell, places.requested)
        found = next((where for where in wanted if where not in places.closed), None)
        if found is None:
            raise ConfigError(f"the docker runner cannot be used: {places.closed[wanted[0]]}",
                              key="runner")
        cells.append(replace(cell, placement=found))
    placed = PlacedPlan(plan.matrix, tuple(cells), plan.skipped, plan.served, plan.renamed)
    return replace(placed, why=_why(placed, places))


def _why(plan: PlacedPlan, places: Places) -> str:
    """`runner: NAME (WHY)`: the runner of the plan's compiled cells and what decided it,
    then what builds here whatever the runner (cross-compiled and CPU cells)."""
    placements = {cell.placement for cell in plan.cells}
    crossed = [cell for cell in plan.cells if cell.placement == "cross"]
    notes = [f"{crossed[0].platform} cells are cross-compiled on this machine"] if crossed \
        else []
    notes += ["CPU cells are built on this machine"] if "cpu" in placements else []
    problem = places.closed.get("builder")
    if placements & {"builder", "image"} or (places.requested != "local" and problem is None
                                             and places.said):
        return f"runner: docker ({'; '.join([places.said, *notes])})"
    if notes:
        return f"runner: local ({'; '.join(notes)})"
    if places.requested == "local":
        return "runner: local (asked for)"
    if not any("builder" in candidates(cell, "auto") for cell in plan.cells) and \
            any(cell.installed for cell in plan.cells):
        return "runner: local (every cell's torch is installed on this machine)"
    if problem is None:
        return f"runner: local ({places.said or 'nothing to build in a container'})"
    return ("runner: local (" + problem + "; so everything runs on this machine, "
            "outside containers: a setup.py project's build, the import gate and kernels' own "
            "tests under bubblewrap)")
