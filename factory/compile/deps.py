"""C++ build dependencies: the header folders each `depends` name of build.toml brings to the
compile units that list it.

torch comes from the cell's torch environment, with Python's and the CUDA toolkit's headers and
those of the CUDA libraries torch's own headers include; every unit of a torch extension sees
them. A cutlass_X_Y name brings that CUTLASS release's header folders (sources/depends.py
fetches them), to every unit of the cell, as kernel-builder's CMake adds them to the whole
extension. Names for other backends (metal-cpp, sycl_tla) have no provider in a CUDA build:
`unprovided` names them, so a build can say so in its log.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ..policy import dependency_releases
from ..toolchain import Toolchain

__all__ = ["dependency_includes", "torch_includes", "unprovided"]


def torch_includes(toolchain: Toolchain) -> list[Path]:
    """The system header folders of a torch extension, in the order the compiler searches. A
    toolkit whose headers are in /usr/include (Debian's) adds none: naming that folder with
    -isystem moves it ahead of libstdc++'s own and breaks their #include_next."""
    torch = toolchain.torch
    toolkit = toolchain.cuda
    cuda = [] if toolkit is None or toolkit.system_include else [toolkit.include]
    return [*torch.include_dirs, *torch.python_includes, *cuda, *torch.cuda_library_includes]


def dependency_includes(toolchain: Toolchain) -> list[Path]:
    """The header folders of the cell's C++ dependencies, in the order their names come."""
    return [folder for dependency in toolchain.dependencies for folder in dependency.folders]


def unprovided(depends: Iterable[str]) -> list[str]:
    """The dependencies no provider of the factory supplies."""
    return sorted({name for name in depends
                   if name != "torch" and name not in dependency_releases()})
