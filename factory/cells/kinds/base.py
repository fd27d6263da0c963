"""What a kind of kernel project does unless it says otherwise: the factory's own compilers
build it from a build.toml repo, with the torch environment's interpreter, into one abi3
wheel per cell (and one per free-threaded CPython). Each kind's package starts from here and
changes what is its own."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...config.model import SizeLimit
from ...config.spec import KernelSpec, ProjectKind
from ...plan.model import Cell, Kernel, Layouts, PythonSettings, units_code
from ...system.process import Log
from ...toolchain.torch import TorchEnv
from ...values.pythons import CPython
from ...values.versions import Version
from ...wheel.gates import Expectation
from ..gate_env import python_beside_torch

__all__ = ["BaseKind", "compiled_expectation"]


class BaseKind:
    """The defaults of every kind (each attribute and method is one of the Kind protocol's)."""

    name: ProjectKind = "kernel-builder"
    form: ProjectKind = "kernel-builder"
    cross_compiles = True
    own_python = False
    free_threaded = True
    units_seen = False
    runs_code_to_build = False
    requires_from_wheel = False
    guard_optional = False

    def plan(self, layouts: Layouts, kernel: Kernel) -> None:
        layouts.per_torch(kernel)

    def abi3(self, spec: KernelSpec) -> bool:
        return True

    def shape(self, cell: Cell) -> tuple[Cell, str | None]:
        return cell, None

    def gpu_code(self, cell: Cell) -> frozenset[str]:
        return units_code(cell)

    def stable_abi(self, cell: Cell) -> Version | None:
        return None

    def record(self, cell: Cell) -> dict[str, Any]:
        """A free-threaded cell names its CPython; the torch environment's is implied."""
        return {"python": str(cell.python), "per_python": True} if cell.free_threaded else {}

    def settings(self, record: Mapping[str, Any]) -> PythonSettings:
        python = record.get("python")
        return None if python is None else CPython.parse(str(python)), python is not None, ()

    def describe(self, spec: KernelSpec) -> str:
        return f"kernel-builder repo, build.toml dialect {spec.dialect}"

    def unsupported(self, spec: KernelSpec) -> str | None:
        return None

    def expectation(self, cell: Cell, max_size: SizeLimit | None) -> Expectation:
        return compiled_expectation(cell, max_size)

    def wheel_requirements(self, spec: KernelSpec) -> tuple[str, ...]:
        return spec.requirements("cuda")

    def build_requirements(self, cell: Cell) -> list[str]:
        return []

    def gate_requirements(self, cell: Cell, wheel: Path | None) -> list[str]:
        return []

    def gate_python(self, cell: Cell, torch: TorchEnv, cache: Path, log: Log, folder: Path,
                    offline: bool, wheelhouses: tuple[Path, ...], wheel: Path | None) -> Path:
        source = f"{wheel.name} (Requires-Dist)" if self.requires_from_wheel and wheel \
            else "build.toml (python-depends)"
        return python_beside_torch(cell, self.gate_requirements(cell, wheel), source, torch,
                                   cache, log, folder, offline, wheelhouses)


def compiled_expectation(cell: Cell, max_size: SizeLimit | None,
                         gpu_covers: bool = False) -> Expectation:
    """What a compiled cell's wheel must be: its name and labelled version, its torch pin, its
    CUDA major and the GPU code the plan promises (a floor where `gpu_covers`: a build that
    picks its own archs), or, for a CPU cell, no GPU code and no CUDA library needed."""
    if cell.cuda is None:
        return Expectation(cell.distribution, cell.wheel_version, cell.torch_pin, None,
                           frozenset(), cell.platform, max_size=max_size, cpu_only=True)
    stable = cell.stable_abi
    return Expectation(
        cell.distribution, cell.wheel_version, cell.torch_pin,
        cell.cuda.version.major, cell.gpu_code, cell.platform, gpu_covers=gpu_covers,
        stable_abi=str(stable) if stable is not None else None, max_size=max_size,
    )
