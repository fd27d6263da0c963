"""Where each cell of a plan is built, decided once, with the reason: its placement.

A cell whose torch lives in an image is built in a container of that image; a cross-compiled
cell and a CPU cell on this machine (the builder images are CUDA toolkits of one platform,
with no cross compiler or emulator); a cell whose torch is an interpreter of this machine on
this machine. Any other compiled cell goes to the factory's builder container when the runner
is docker, or auto and docker can be used (what was found of docker is handed in), else to
this machine. So one matrix may build some cells in containers and others here.
"""

from __future__ import annotations

from dataclasses import replace

from ..config.model import RunnerChoice
from ..errors import ConfigError
from .model import Cell, Placement, Plan

__all__ = ["needs_docker", "place", "placement_of"]


def placement_of(cell: Cell, docker: bool) -> Placement:
    """Where `cell` is built, `docker` telling whether compiled cells go to containers."""
    if cell.installed is not None and cell.installed.image is not None:
        return "image"
    if cell.cross:
        return "cross"
    if cell.backend == "cpu":
        return "cpu"
    if cell.installed is not None or cell.cuda is None or not docker:
        return "host"
    return "builder"


def needs_docker(plan: Plan, requested: RunnerChoice) -> bool:
    """Whether placing the plan's cells asks whether docker can be used: for a cell whose
    torch lives in an image, for cells the builder container could take (unless --runner
    local), and, where no cell ties the run to this machine (cross-compiled, CPU, or with an
    installed torch), for the run's runner itself (docker then also removes what an
    interrupted run left)."""
    if any(placement_of(cell, False) == "image" for cell in plan.cells):
        return True
    if requested == "local":
        return False
    if any(placement_of(cell, True) == "builder" for cell in plan.cells):
        return True
    return not any(cell.cross or cell.backend == "cpu" or cell.installed is not None
                   for cell in plan.cells)


def place(plan: Plan, requested: RunnerChoice, docker_problem: str | None,
          docker_said: str = "") -> tuple[Plan, str]:
    """The plan with each cell's placement, and why, in a line. `docker_problem` is why docker
    cannot be used (None: it can), `docker_said` what it answered (its version, the
    containers of an interrupted run it removed)."""
    _refuse(plan, requested, docker_problem)
    docker = requested != "local" and docker_problem is None
    cells = tuple(replace(cell, placement=placement_of(cell, docker)) for cell in plan.cells)
    placed = replace(plan, cells=cells)
    return placed, _why(placed, requested, docker_problem, docker_said)


def _refuse(plan: Plan, requested: RunnerChoice, docker_problem: str | None) -> None:
    """A placement the request or this machine makes impossible is bad input."""
    here = [cell for cell in plan.cells if placement_of(cell, False) in ("cross", "cpu")]
    if here and requested == "docker":
        first = here[0]
        what = (f"{first.id} is cross-compiled (cross: true)" if first.cross
                else f"{first.id} is a CPU cell")
        raise ConfigError(f"{what}, which only the local runner builds: build it with "
                          "--runner local (or auto)", key="runner")
    in_images = [cell for cell in plan.cells if placement_of(cell, False) == "image"]
    if in_images and requested == "local":
        installed = in_images[0].installed
        assert installed is not None
        raise ConfigError(f"{installed.describe()} lives in an image: build it with the "
                          "docker runner (--runner docker or auto)", key="runner")
    builders = any(placement_of(cell, True) == "builder" for cell in plan.cells)
    if docker_problem is not None and (in_images or (requested == "docker" and builders)):
        raise ConfigError(f"the docker runner cannot be used: {docker_problem}", key="runner")


def _why(plan: Plan, requested: RunnerChoice, docker_problem: str | None,
         docker_said: str) -> str:
    """`runner: NAME (WHY)`: the runner of the plan's compiled cells and what decided it,
    then what builds here whatever the runner (cross-compiled and CPU cells)."""
    placements = {cell.placement for cell in plan.cells}
    crossed = [cell for cell in plan.cells if cell.placement == "cross"]
    notes = [f"{crossed[0].platform} cells are cross-compiled on this machine"] if crossed \
        else []
    notes += ["CPU cells are built on this machine"] if "cpu" in placements else []
    if placements & {"builder", "image"} or (requested != "local" and docker_problem is None
                                             and docker_said):
        return f"runner: docker ({'; '.join([docker_said, *notes])})"
    if notes:
        return f"runner: local ({'; '.join(notes)})"
    if requested == "local":
        return "runner: local (asked for)"
    if not any(placement_of(cell, True) == "builder" for cell in plan.cells) and \
            any(cell.installed for cell in plan.cells):
        return "runner: local (every cell's torch is installed on this machine)"
    if docker_problem is None:
        return f"runner: local ({docker_said or 'nothing to build in a container'})"
    return ("runner: local (" + docker_problem + "; so everything runs on this machine, "
            "outside containers: a setup.py project's build, the import gate and kernels' own "
            "tests under bubblewrap)")
