"""A kernel-builder repo of pure Python ([torch-noarch]): its package from torch-ext/, no code
compiled. One py3-none-any wheel serves every torch and platform; a kernel that compiles its
GPU code when it runs (CuTe DSL, TVM FFI, triton) gets one per torch x CUDA of the matrix,
labelled as the cell's, requiring that CUDA major's build of its dependencies and proven on
that torch."""

from __future__ import annotations

from pathlib import Path

from ....compile.generated import noarch_ops_module
from ....config.model import SizeLimit
from ....config.spec import KernelSpec, ProjectKind
from ....plan.model import Cell, Kernel, Layouts
from ....wheel.assemble import CoreMetadata
from ....wheel.gates import Expectation
from ...job import Built, Job
from ...records import toolchain_facts
from ..base import BaseKind
from ..kernel_builder.build import copy_package, final_wheel, kernel_core_metadata

__all__ = ["NOARCH", "Noarch"]


class Noarch(BaseKind):
    """A pure-Python kernel-builder repo."""

    name: ProjectKind = "noarch"

    def plan(self, layouts: Layouts, kernel: Kernel) -> None:
        layouts.noarch(kernel)

    def build(self, job: Job) -> Built:
        cell, work = job.cell, job.work
        _, package = copy_package(job)
        (package / "_ops.py").write_text(noarch_ops_module(cell.ops_namespace))
        facts = toolchain_facts(torch=str(cell.torch) if cell.torch else None)
        return Built(final_wheel(cell, job.options, work / "pkg", "py3-none-any", facts,
                                 work / "dist", _metadata(cell), purelib=True))

    def expectation(self, cell: Cell, max_size: SizeLimit | None) -> Expectation:
        """Its name and version, and, for a wheel of one cell, its torch pin; no code."""
        return Expectation(cell.distribution, cell.wheel_version,
                           "any" if cell.torch is None else cell.torch_pin, None,
                           frozenset(), None, max_size=max_size)

    def wheel_requirements(self, spec: KernelSpec) -> tuple[str, ...]:
        return spec.requirements(None)

    def gate_requirements(self, cell: Cell, wheel: Path | None) -> list[str]:
        """A wheel of one CUDA cell needs its dependencies in the build of that CUDA major."""
        if cell.cuda is None:
            return []
        return list(cell.spec.requirements("cuda", cell.cuda.version.major))


def _metadata(cell: Cell) -> CoreMetadata:
    spec = cell.spec
    if cell.cuda is None:
        return kernel_core_metadata(
            cell, f"{spec.name} kernel (pure Python, any torch), built by kernel-wheel-factory",
            ("torch", *spec.requirements(None)))
    return kernel_core_metadata(
        cell, f"{spec.name} kernel (pure Python, compiling its GPU code when it runs) for "
              f"torch {cell.torch_shown} and CUDA {cell.cuda.version}, built by "
              "kernel-wheel-factory",
        (f"torch{cell.torch_pin}", *spec.requirements("cuda", cell.cuda.version.major)))


NOARCH = Noarch()
