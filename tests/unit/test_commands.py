"""Compiler and linker command lines of a cell, against a toolchain that is only paths: what
each unit is compiled with, checked without running a compiler (but for one unit that real
nvcc compiles twice, to show its object does not change)."""

from __future__ import annotations

from pathlib import Path

from factory.compile.commands import link_command

from ..support.plans import TOOLCHAIN


def test_the_link_names_torch_and_the_cuda_runtime() -> None:
    argv = link_command([Path("/o/a.o"), Path("/o/b.o")], Path("/pkg/x.abi3.so"), TOOLCHAIN)
    assert argv[:4] == ["g++", "-shared", "-o", "/pkg/x.abi3.so"]
    assert "-L/cache/envs/t/lib/python3.11/site-packages/torch/lib" in argv
    assert "-L/cache/cuda/13.0/nvidia/cu13/lib" in argv
    assert argv[-6:] == ["-lc10", "-ltorch", "-ltorch_cpu", "-lc10_cuda", "-ltorch_cuda",
                         "-lcudart"]
