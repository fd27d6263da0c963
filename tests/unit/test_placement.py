"""Where each cell is built is decided once, by the planner (plan/placement.py), from the cell
and what was found of docker: a value of the cell with the reason in one line; a matrix may mix
placements, and a placement the request or this machine rules out is one line of bad input."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from factory.config.model import RunnerChoice
from factory.config.torches import InstalledTorch
from factory.errors import ConfigError
from factory.plan.model import Placement, Plan
from factory.plan.placement import PlacedPlan, Places, candidates, needs_containers, place

from ..support.plans import kernel, plan_of

INSTALLED = InstalledTorch("python3", "2.5.0a0+e000cf0ad9.nv24.10", "12.6", True, "3.10",
                           "/usr", "/usr/lib/python3/site-packages", "/usr/include/python3.10",
                           ())


def demo_plan(tmp_path: Path) -> Plan:
    """One cell (torch 2.11, CUDA 13.0, sm_90) of a demo kernel."""
    kernel(tmp_path)
    return plan_of(tmp_path, """
        kernels: [{path: demo, version: 1.0}]
        torch: ["2.11"]
        cuda: {"13.0": {sms: ["9.0"]}}
    """)


def with_cells(plan: Plan, *changes: dict[str, object]) -> Plan:
    """The plan's one cell once for each change (its id made unique)."""
    (cell,) = plan.cells
    cells = tuple(replace(cell, label=f"{cell.label}-{n}", **change)  # type: ignore[arg-type]
                  for n, change in enumerate(changes))
    return replace(plan, cells=cells)


CONTAINERS: tuple[Placement, ...] = ("builder", "image")


def placed_as(plan: Plan, requested: RunnerChoice, problem: str | None,
              said: str = "") -> tuple[PlacedPlan, str]:
    """The plan placed where the runners of a run asking for `requested` can take its cells:
    those with containers closed for `problem`, if any."""
    closed: dict[Placement, str] = dict.fromkeys(CONTAINERS, problem) if problem else {}
    placed = place(plan, Places(requested, closed, said))
    return placed, placed.why


def placements(plan: Plan) -> list[str | None]:
    return [cell.placement for cell in plan.cells]


def test_a_compiled_cell_goes_to_the_builder_only_where_docker_can_be_used(
        tmp_path: Path) -> None:
    plan = demo_plan(tmp_path)
    placed, why = placed_as(plan, "auto", None, "docker 27.5.1 answers")
    assert placements(placed) == ["builder"] and why == "runner: docker (docker 27.5.1 answers)"
    placed, why = placed_as(plan, "auto", "no docker daemon answers (refused)")
    assert placements(placed) == ["host"]
    assert why.startswith("runner: local (no docker daemon answers (refused); so everything runs")
    placed, why = placed_as(plan, "local", None, "docker 27.5.1 answers")
    assert placements(placed) == ["host"] and why == "runner: local (asked for)"
    assert needs_containers(plan, "auto") and not needs_containers(plan, "local")
    with pytest.raises(ConfigError, match="runner: the docker runner cannot be used: no docker"):
        placed_as(plan, "docker", "no docker daemon answers (refused)")


def test_a_matrix_mixes_placements(tmp_path: Path) -> None:
    plan = with_cells(demo_plan(tmp_path), {}, {"cross": True, "platform": "aarch64"},
                      {"installed": INSTALLED},
                      {"installed": replace(INSTALLED, image="nvcr.io/nvidia/pytorch:24.10",
                                            image_id="sha256:" + "0" * 64)})
    placed, why = placed_as(plan, "auto", None, "docker 27.5.1 answers")
    assert placements(placed) == ["builder", "cross", "host", "image"]
    assert [candidates(cell, "auto") for cell in plan.cells] == [
        ("builder", "host"), ("cross",), ("host",), ("image",)]  # `factory images` too
    assert why == ("runner: docker (docker 27.5.1 answers; aarch64 cells are cross-compiled on "
                   "this machine)")
    # the image's cell rules --runner local out before docker is asked
    with pytest.raises(ConfigError, match="lives in an image: build it with the docker runner"):
        needs_containers(plan, "local")


@pytest.mark.parametrize(("change", "requested", "said"), [
    ({"cross": True, "platform": "aarch64"}, "docker", "is cross-compiled (cross: true), which "
     "only the local runner builds"),
    ({"installed": replace(INSTALLED, image="nvcr.io/nvidia/pytorch:24.10")}, "local",
     "lives in an image: build it with the docker runner"),
])
def test_a_placement_the_request_rules_out_is_bad_input(tmp_path: Path, change: dict[str, object],
                                                        requested: str, said: str) -> None:
    plan = with_cells(demo_plan(tmp_path), change)
    with pytest.raises(ConfigError, match=re.escape(said)):
        placed_as(plan, requested, None, "docker 27.5.1 answers")  # type: ignore[arg-type]


def test_an_image_cell_needs_docker_even_when_auto(tmp_path: Path) -> None:
    plan = with_cells(demo_plan(tmp_path),
                      {"installed": replace(INSTALLED, image="nvcr.io/nvidia/pytorch:24.10")})
    with pytest.raises(ConfigError, match="the docker runner cannot be used: no docker daemon"):
        placed_as(plan, "auto", "no docker daemon answers (refused)")


def test_docker_is_asked_as_the_runs_runner_unless_a_cell_ties_it_here(tmp_path: Path) -> None:
    """A plan with nothing for a container asks docker only as the run's runner (it then also
    clears what an interrupted run left); an installed torch of this machine keeps the run
    here without asking."""
    noarch = with_cells(demo_plan(tmp_path), {"cuda": None, "torch": None})
    assert needs_containers(noarch, "auto") and not needs_containers(noarch, "local")
    placed, why = placed_as(noarch, "auto", None, "docker 27.5.1 answers")
    assert placements(placed) == ["host"] and why == "runner: docker (docker 27.5.1 answers)"
    installed = with_cells(demo_plan(tmp_path / "other"), {"installed": INSTALLED})
    assert not needs_containers(installed, "auto")
    assert placed_as(installed, "auto", None)[1] == \
        "runner: local (every cell's torch is installed on this machine)"


class Heard:
    """A voice that keeps what it was told."""

    def __init__(self) -> None:
        self.notes: list[str] = []
        self.warnings: list[str] = []

    def note(self, text: str) -> None:
        self.notes.append(text)

    def warn(self, text: str) -> None:
        self.warnings.append(text)


@pytest.mark.parametrize("unconfined", [False, True])
def test_unconfined_is_said_where_the_code_of_others_runs_on_this_machine(
        tmp_path: Path, unconfined: bool) -> None:
    from factory.config.matrix import load_matrix
    from factory.pipeline.build import choose
    from factory.pipeline.options import Given, settle

    plan = demo_plan(tmp_path)
    options = settle(Given(runner="local", build_root=tmp_path / "build", unconfined=unconfined),
                     tmp_path / "cache", load_matrix(tmp_path / "matrix.yaml"), {})
    heard = Heard()
    choose(options, plan, heard)  # type: ignore[arg-type]
    assert heard.notes == ["runner: local (asked for)"]
    assert heard.warnings == ([
        "--unconfined: the code of others that runs on this machine (a setup.py build, a "
        "kernel's import gate and tests) runs outside the sandbox, with your rights, your files "
        "and your network"] if unconfined else [])
