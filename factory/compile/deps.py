"""C++ build dependencies: the header folders each `depends` name of build.toml brings to the
compile units that list it.

torch comes from the cell's torch environment, with Python's and the CUDA toolkit's headers and
those of the CUDA libraries torch's own headers include; every unit of a torch extension sees
them. The other names kernel-builder knows (cutlass_X_Y, metal-cpp, sycl_tla) have no provider
here yet: `unprovided` names them, so a build can say so in its log.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ..toolchain import Toolchain

__all__ = ["PROVIDED", "torch_includes", "unprovided"]

PROVIDED = frozenset({"torch"})


def torch_includes(toolchain: Toolchain) -> list[Path]:
    """The system header folders of a torch extension, in the order the compiler searches. A
    toolkit whose headers are in /usr/include (Debian's) adds none: naming that folder with
    -isystem moves it ahead of libstdc++'s own and breaks their #include_next."""
    torch = toolchain.torch
    cuda = [] if toolchain.cuda.system_include else [toolchain.cuda.include]
    return [*torch.include_dirs, torch.python_include, *cuda, *torch.cuda_library_includes]


def unprovided(depends: Iterable[str]) -> list[str]:
    """The dependencies no provider of the factory supplies."""
    return sorted({name for name in depends if name not in PROVIDED})
