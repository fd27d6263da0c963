"""The tools a cell compiles with, taking plain versions (not matrix entries): a CUDA toolkit
(cuda.py: one the machine has, or PyPI's nvidia wheels), a torch environment (torch.py: made
with uv, or one already installed) and the host C++ compiler, chosen to be one the toolkit's
nvcc accepts. A cell whose torch lives in a container image runs its compilers there
(`Toolchain.runs_in`)."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .. import defaults
from ..errors import BuildError
from ..policy import cuda_policy
from ..sources.depends import Dependency
from ..system.process import ProcessError, bounded_run
from ..values.versions import Version
from .cuda import CudaToolkit
from .standard import cxx_standard
from .torch import TorchEnv

__all__ = ["CommandPrefix", "HostCompiler", "Toolchain", "cxx_standard", "host_compiler",
           "path_compilers"]


@dataclass(frozen=True)
class CommandPrefix:
    """How a command reaches the machine it runs on: `argv` as given on this machine, or
    behind `docker exec [options] CONTAINER` for a toolchain inside a container."""

    prefix: tuple[str, ...] = ()

    def argv(self, argv: Sequence[str], cwd: Path) -> tuple[list[str], Path | None]:
        """The command line to run and the folder to run it in, on this machine."""
        if not self.prefix:
            return list(argv), cwd
        return [*self.prefix[:-1], "--workdir", str(cwd), self.prefix[-1], *argv], None


@dataclass(frozen=True)
class HostCompiler:
    """The C++ compiler for host code and nvcc's host side, and where its choice came from
    (said in the log, the provenance and any gate it fails)."""

    command: str
    origin: str  # what chose it, after "from": "$CXX", "the PATH ($CXX unset)", ...


@dataclass(frozen=True)
class Toolchain:
    """Everything a cell's compile and link commands are made from."""

    cuda: CudaToolkit | None  # None: a CPU cell, which compiles no CUDA
    torch: TorchEnv
    cxx: str  # the host C++ compiler
    cxx_std: str
    runs_in: CommandPrefix = field(default_factory=CommandPrefix)
    dependencies: tuple[Dependency, ...] = ()  # the cell's C++ dependencies (CUTLASS, ...)
    cxx_origin: str = ""  # where the host compiler's choice came from (HostCompiler.origin)


def host_compiler(cuda: Version | None, given: str | None,
                  available: Mapping[str, str] | None = None,
                  where: str = "the PATH") -> HostCompiler:
    """The C++ compiler for host code and for nvcc's host side: the one the machine names
    (`given`, its $CXX), else g++ when nvcc of this CUDA version accepts its version, else the
    newest g++-N it accepts. `available` maps the g++ commands of the machine the build runs
    on to their versions (default: this machine's PATH; `where` names them)."""
    if given:
        return HostCompiler(given, "$CXX")
    if cuda is None:  # no nvcc to please: a CPU cell
        return HostCompiler("g++", f"{where} ($CXX unset)")
    compilers = path_compilers() if available is None else available
    policy = cuda_policy(cuda)
    newest = policy.max_gcc if policy else None

    def major(name: str) -> int | None:
        found = re.match(r"(\d+)", compilers.get(name, ""))
        return int(found[1]) if found else None

    default = major("g++")
    if newest is None or (default is not None and default <= newest):
        return HostCompiler("g++", f"{where} ($CXX unset)")
    accepted = sorted(((major(name), name) for name in compilers
                       if (major(name) or newest + 1) <= newest), reverse=True)
    if accepted:
        return HostCompiler(accepted[0][1], f"{where}, the newest g++ nvcc of CUDA {cuda} "
                                            f"accepts (gcc {newest} at most; $CXX unset)")
    found = f"g++ {compilers['g++']}" if "g++" in compilers else "no g++"
    raise BuildError(f"nvcc of CUDA {cuda} accepts gcc {newest} at most, and this machine has "
                     f"{found}: install g++-{newest} (or older), or set CXX")


def path_compilers() -> dict[str, str]:
    """The g++ and g++-N commands on this machine's PATH, with their versions."""
    found: dict[str, str] = {}
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        if not folder or not Path(folder).is_dir():
            continue
        for path in sorted(Path(folder).glob("g++*")):
            if re.fullmatch(r"g\+\+(-\d+)?", path.name) and path.name not in found \
                    and shutil.which(str(path)):
                found[path.name] = _dump_version(path)
    return found


def _dump_version(compiler: Path) -> str:
    try:
        done = bounded_run([compiler, "-dumpfullversion"], defaults.COMPILER_PROBE_TIMEOUT)
    except ProcessError:
        return ""
    return done.stdout.strip()
