"""A PEP 517 project whose kernels are cuTile-Python functions it declares: its wheel holds no
extension module but a cubin per SM and signature, exported by the factory with cuTile's
assembler in the project's build environment (which its import gate uses too). One wheel
serves every CPython with the GIL; it needs a CUDA 13 torch and compute capability 8.0 or
newer."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from .... import defaults
from ....config.model import SizeLimit
from ....config.spec import KernelSpec, ProjectKind
from ....plan.model import Cell
from ....system.process import Log
from ....toolchain.torch import TorchEnv
from ....values.versions import major_minor
from ....wheel.gates import Expectation
from ...job import Built, Job
from ..pep517 import Pep517
from ..pep517.build import provide_build_env
from .build import build_cutile, cutile_build_requirements

__all__ = ["CUTILE", "Cutile"]


class Cutile(Pep517):
    """A cuTile-Python project."""

    name: ProjectKind = "cutile"
    free_threaded = False  # cubins, no extension module: nothing for one to load
    requires_from_wheel = False  # its build environment has what its import needs

    def abi3(self, spec: KernelSpec) -> bool:
        return True

    def shape(self, cell: Cell) -> tuple[Cell, str | None]:
        """Its SMs those tileiras compiles for (compute capability 8.0 and newer, each as its
        own cubin: no PTX), or why it has none. cuTile's assembler ships for CUDA 13.2 and
        newer and its cubins need a CUDA 13 driver (r580), which every CUDA 13 torch asks
        for."""
        assert cell.cuda is not None
        if cell.cuda.version.major < defaults.CUTILE_CUDA_MAJOR:
            return cell, (f"cuTile kernels need a CUDA {defaults.CUTILE_CUDA_MAJOR} torch; "
                          f"this cell's is CUDA {major_minor(cell.cuda.version)}")
        kept = tuple(dict.fromkeys(replace(cap, variant="", ptx=False) for cap in cell.sms
                                   if cap.major >= defaults.CUTILE_MIN_SM))
        if not kept:
            return cell, (f"cuTile compiles for compute capability {defaults.CUTILE_MIN_SM}.0 "
                          f"and newer; the cell's SMs are "
                          f"{' '.join(str(cap) for cap in cell.sms)}")
        return replace(cell, sms=kept), None

    def record(self, cell: Cell) -> dict[str, Any]:
        return {**super().record(cell), "cutile": True}

    def build(self, job: Job) -> Built:
        return build_cutile(job)

    def expectation(self, cell: Cell, max_size: SizeLimit | None) -> Expectation:
        """No shared object: a cubin per SM and signature."""
        assert cell.cuda is not None
        return Expectation(cell.distribution, cell.wheel_version, cell.torch_pin,
                           cell.cuda.version.major, None, None, max_size=max_size,
                           cubins=cell.gpu_code)

    def gate_requirements(self, cell: Cell, wheel: Path | None) -> list[str]:
        """Its build environment's requirements, cuda-tile among them."""
        assert cell.spec.cutile_requirement is not None
        return cutile_build_requirements(cell.spec.root, cell.spec.cutile_requirement)

    def gate_python(self, cell: Cell, torch: TorchEnv, cache: Path, log: Log, folder: Path,
                    offline: bool, wheelhouses: tuple[Path, ...], wheel: Path | None) -> Path:
        """The environment its build made."""
        return provide_build_env(torch, self.gate_requirements(cell, wheel), cache, log,
                                 create=False)


CUTILE = Cutile()
