"""The tools a cell compiles with, taking plain versions (not matrix entries): a CUDA toolkit
(cuda.py: PyPI's nvidia wheels, or one installed on the machine), a torch environment
(torch.py: made with uv) and the host C++ compiler. A new way to provide one of them (an
existing interpreter, an image's own toolkit) yields the same CudaToolkit or TorchEnv."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..policy import torch_release
from ..versions import Version
from .cuda import CudaToolkit
from .torch import TorchEnv

__all__ = ["Toolchain", "cxx_standard", "host_compiler"]


@dataclass(frozen=True)
class Toolchain:
    """Everything a cell's compile and link commands are made from."""

    cuda: CudaToolkit
    torch: TorchEnv
    cxx: str  # the host C++ compiler
    cxx_std: str


def host_compiler() -> str:
    """The C++ compiler for host code and for nvcc's host side: $CXX, else g++."""
    return os.environ.get("CXX", "g++")


def cxx_standard(torch: Version) -> str:
    release = torch_release(torch)
    return release.cxx_std if release else "20"
