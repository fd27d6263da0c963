"""A setup.py / pyproject.toml CUDA extension, built by `build` through the project's own
backend: its compilers are its own (the factory wraps them to pin what they make), so it is
built natively, with a CPython per cell (one abi3 wheel where it declares py_limited_api), its
build runs the kernel's code (a container of its own under docker), and its wheel must carry
SASS for every SM of the cell, whatever else it holds."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ....config.model import SizeLimit
from ....config.spec import KernelSpec, ProjectKind
from ....plan.model import Cell, PythonSettings, sass_for_sms
from ....prove.testenv import installed_beside_torch
from ....values.pythons import CPython
from ....wheel.gates import Expectation
from ....wheel.read import read_wheel
from ...job import Built, Job
from ..base import BaseKind, compiled_expectation
from .build import build_project, build_requirements

__all__ = ["PEP517", "Pep517"]


class Pep517(BaseKind):
    """A PEP 517 CUDA extension."""

    name: ProjectKind = "pep517"
    form: ProjectKind = "pep517"
    cross_compiles = False
    own_python = True
    units_seen = True
    runs_code_to_build = True
    requires_from_wheel = True
    guard_optional = True

    def abi3(self, spec: KernelSpec) -> bool:
        return spec.limited_api

    def gpu_code(self, cell: Cell) -> frozenset[str]:
        """It compiles with its own arch list (many hard-code one): SASS for every SM of the
        cell is the floor; whatever else it holds is recorded, not refused."""
        return sass_for_sms(cell)

    def record(self, cell: Cell) -> dict[str, Any]:
        return {"project": "pep517", "python": str(cell.python), "per_python": cell.per_python,
                "env": dict(cell.env), "guard": cell.guard}

    def settings(self, record: Mapping[str, Any]) -> PythonSettings:
        env = record.get("env") or {}
        return (CPython.parse(str(record["python"])), bool(record["per_python"]),
                tuple((str(name), str(value)) for name, value in env.items()))

    def describe(self, spec: KernelSpec) -> str:
        return "setup.py/pyproject.toml project"

    def build(self, job: Job) -> Built:
        return build_project(job)

    def expectation(self, cell: Cell, max_size: SizeLimit | None) -> Expectation:
        return compiled_expectation(cell, max_size, gpu_covers=True)

    def wheel_requirements(self, spec: KernelSpec) -> tuple[str, ...]:
        """What pyproject.toml's [project] dependencies state (a setup.py's install_requires
        is known once built: gate_requirements reads the wheel)."""
        return tuple(text for text in spec.project_dependencies if installed_beside_torch(text))

    def build_requirements(self, cell: Cell) -> list[str]:
        return build_requirements(cell.source.root)

    def gate_requirements(self, cell: Cell, wheel: Path | None) -> list[str]:
        """Its wheel's own Requires-Dist but torch, once it is built."""
        if wheel is None:
            return []
        return [text for text in read_wheel(wheel).requires if installed_beside_torch(text)]


PEP517 = Pep517()
