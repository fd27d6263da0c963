"""The interpreter the import gate loads a cell's wheel with: the cell's torch, with what the
wheel needs beside it where it needs more than torch (each kind of project says what that is:
cells/kinds/).

A pure-Python wheel of a kernel that compiles GPU code when it runs (CuTe DSL, TVM FFI,
triton), or a PEP 517 project's wheel that requires more than torch, gets those requirements
resolved and installed beside the cell's torch (uv, from its cache or the --wheelhouse folders
when offline), and what was resolved goes to the log, so the cell records the dependencies its
proof ran with.
"""

from __future__ import annotations

from pathlib import Path

from .. import defaults
from ..errors import BuildError, CommandFailed
from ..plan.model import Cell
from ..prove.testenv import Needed, unavailable
from ..system.process import Log, bounded_run
from ..system.uv import uv_bin
from ..toolchain.torch import TorchEnv, env_beside_torch

__all__ = ["python_beside_torch"]


def python_beside_torch(cell: Cell, requires: list[str], source: str, torch: TorchEnv,
                        cache: Path, log: Log, folder: Path, offline: bool = False,
                        wheelhouses: tuple[Path, ...] = ()) -> Path:
    """The interpreter to import `cell`'s wheel with: torch's own when it needs nothing else,
    else one of an environment made in `folder` that sees torch and holds `requires` (which
    `source` names, in the one line of a failure)."""
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
        needed = [Needed(text, source) for text in requires]
        raise BuildError(unavailable(failed.output, needed, offline, wheelhouses,
                                     "import")) from None
    python = folder / "bin" / "python"
    resolved = bounded_run([uv_bin(), "pip", "freeze", "--python", str(python)],
                           defaults.TOOL_TIMEOUT).stdout.split()
    log.write(f"   resolved for torch {torch.torch_version} (CUDA {cell.cuda.version}): "
              f"{', '.join(resolved) or 'nothing'}")
    return python
