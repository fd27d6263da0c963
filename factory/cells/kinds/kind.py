"""The one protocol a kind of kernel project answers: the planner's half (plan/model.py's
KindPlan: the cells it wants, its records) and the half that builds and proves its wheels."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from ...config.model import SizeLimit
from ...config.spec import KernelSpec
from ...plan.model import Cell, KindPlan
from ...system.process import Log
from ...toolchain.torch import TorchEnv
from ...wheel.gates import Expectation
from ..job import Built, Job

__all__ = ["Kind"]


class Kind(KindPlan, Protocol):
    """A kind of kernel project: how its cells are planned (KindPlan), built, held to what
    their wheels must be, and given the environment their import gate runs in."""

    runs_code_to_build: bool  # its build runs the kernel's own code (a setup.py)
    requires_from_wheel: bool  # what its wheel needs beside torch is read from the wheel
    guard_optional: bool  # the matrix may turn its packages' import guard off

    def unsupported(self, spec: KernelSpec) -> str | None:
        """Why the factory cannot build the project at all, or None."""

    def build(self, job: Job) -> Built:
        """Build the job's cell into a wheel."""

    def expectation(self, cell: Cell, max_size: SizeLimit | None) -> Expectation:
        """What the cell's wheel must be, for the gates."""

    def wheel_requirements(self, spec: KernelSpec) -> tuple[str, ...]:
        """The Requires-Dist (besides torch) its wheels have, as build.toml states them."""

    def build_requirements(self, cell: Cell) -> list[str]:
        """What its build environment holds besides the cell's torch."""

    def gate_requirements(self, cell: Cell, wheel: Path | None) -> list[str]:
        """What the cell's wheel (once built: `wheel`) needs beside torch to be imported."""

    def gate_python(self, cell: Cell, torch: TorchEnv, cache: Path, log: Log, folder: Path,
                    offline: bool, wheelhouses: tuple[Path, ...], wheel: Path | None) -> Path:
        """The interpreter the import gate loads the cell's wheel with (`folder`: where an
        environment of its own is made, when it needs one)."""
