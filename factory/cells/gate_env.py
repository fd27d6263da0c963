"""The interpreter the import gate loads a cell's wheel with: the cell's torch, with what the
wheel needs beside it where it needs more than torch.

A compiled wheel needs torch alone. A cuTile wheel needs cuda-tile: its build environment has
it beside the cell's torch. A pure-Python wheel of a kernel that compiles GPU code when it runs
(CuTe DSL, TVM FFI, triton) needs its Python dependencies, in the build of the cell's CUDA
major: they are resolved and installed beside the cell's torch (uv, from its cache or the
--wheelhouse folders when offline), and what was resolved goes to the log, so the cell records
the dependencies its proof ran with.
"""

from __future__ import annotations

from pathlib import Path

from .. import defaults
from ..errors import BuildError, CommandFailed
from ..plan.model import Cell
from ..prove.testenv import Needed, installed_beside_torch, unavailable
from ..system.process import Log, bounded_run
from ..system.uv import uv_bin
from ..toolchain.torch import TorchEnv, env_beside_torch
from ..wheel.read import read_wheel
from .cutile import cutile_build_requirements
from .pep517 import provide_build_env

__all__ = ["gate_python", "gate_requirements"]


def gate_requirements(cell: Cell, wheel: Path | None = None) -> list[str]:
    """What the cell's wheel needs beside torch to be imported: a cuTile wheel its build
    environment's requirements (cuda-tile among them), a pure-Python wheel of a kernel that
    compiles when it runs its dependencies for the cell's CUDA major, a PEP 517 project's wheel
    (once built: `wheel`) its own Requires-Dist but torch; nothing for the rest."""
    spec = cell.spec
    if spec.is_cutile:
        assert spec.cutile_requirement is not None
        return cutile_build_requirements(spec.root, spec.cutile_requirement)
    if spec.is_noarch and cell.cuda is not None:
        return list(spec.requirements("cuda", cell.cuda.version.major))
    if spec.is_pep517 and wheel is not None:
        return [text for text in read_wheel(wheel).requires if installed_beside_torch(text)]
    return []


def gate_python(cell: Cell, torch: TorchEnv, cache: Path, log: Log, folder: Path,
                offline: bool = False, wheelhouses: tuple[Path, ...] = (),
                wheel: Path | None = None) -> Path:
    """The interpreter to import `cell`'s wheel (`wheel`) with (`folder`: where an environment
    of its own is made, when it needs one)."""
    requires = gate_requirements(cell, wheel)
    if cell.spec.is_cutile:  # its build made that environment
        return provide_build_env(torch, requires, cache, log, create=False)
    if not requires:
        return torch.python
    assert cell.cuda is not None
    log.step(f"installing the wheel's requirements beside torch {torch.torch_version}: "
             f"{' '.join(requires)}")
    try:
        env_beside_torch(folder, torch, requires, cache, log, offline,
                         "installing the wheel's requirements",
                         "a requirement of the wheel installed a torch of its own",
                         wheelhouses, view=True)
    except CommandFailed as failed:
        source = f"{wheel.name} (Requires-Dist)" if cell.spec.is_pep517 and wheel else \
            "build.toml (python-depends)"
        needed = [Needed(text, source) for text in requires]
        raise BuildError(unavailable(failed.output, needed, offline, wheelhouses,
                                     "import")) from None
    python = folder / "bin" / "python"
    resolved = bounded_run([uv_bin(), "pip", "freeze", "--python", str(python)],
                           defaults.TOOL_TIMEOUT).stdout.split()
    log.write(f"   resolved for torch {torch.torch_version} (CUDA {cell.cuda.version}): "
              f"{', '.join(resolved) or 'nothing'}")
    return python
