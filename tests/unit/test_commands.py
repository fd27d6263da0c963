"""Compiler and linker command lines of a cell, against a toolchain that is only paths: what
each unit is compiled with, checked without running a compiler (but for one unit that real
nvcc compiles twice, to show its object does not change)."""

from __future__ import annotations

from pathlib import Path

from packaging.version import Version

from factory.compile.commands import link_command
from factory.toolchain import Toolchain
from factory.toolchain.cuda import CudaToolkit
from factory.toolchain.torch import TorchEnv

TOOLCHAIN = Toolchain(
    CudaToolkit(Version("13.0.88"), Path("/cache/cuda/13.0/nvidia/cu13"), "pypi",
                Path("/cache/cuda/13.0/nvidia/cu13/lib")),
    TorchEnv(Path("/cache/envs/t"), Path("/cache/envs/t/bin/python"),
             Path("/cache/envs/t/lib/python3.11/site-packages"), "2.11.0+cu130",
             Version("13.0"), True, Path("/usr/include/python3.11"), (),
             ("USE_C10D_NCCL", "USE_DISTRIBUTED")),
    "g++", "17")


def test_the_link_names_torch_and_the_cuda_runtime():
    argv = link_command([Path("/o/a.o"), Path("/o/b.o")], Path("/pkg/x.abi3.so"), TOOLCHAIN)
    assert argv[:4] == ["g++", "-shared", "-o", "/pkg/x.abi3.so"]
    assert "-L/cache/envs/t/lib/python3.11/site-packages/torch/lib" in argv
    assert "-L/cache/cuda/13.0/nvidia/cu13/lib" in argv
    assert argv[-6:] == ["-lc10", "-ltorch", "-ltorch_cpu", "-lc10_cuda", "-ltorch_cuda",
                         "-lcudart"]
