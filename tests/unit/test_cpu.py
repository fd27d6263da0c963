"""CPU cells' commands, gates and import guard, checked without a compiler: what a CPU build
defines and links, the gate that refuses a CUDA library in a CPU wheel, and the guard that takes
any build of its torch minor."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from factory.compile.commands import link_command
from factory.compile.deps import torch_includes
from factory.compile.generated import import_guard
from factory.wheel.gates import Expectation, check_wheel
from factory.wheel.inspect import WheelReport

from ..support.plans import TOOLCHAIN
from ..support.wheels import SO, report

CPU_TOOLCHAIN = dataclasses.replace(TOOLCHAIN, cuda=None)
CPU_NAME = "img2gray-1.0.0+cputorch211-cp39-abi3-manylinux_2_28_x86_64.whl"
CPU_EXPECT = Expectation("img2gray", "1.0.0+cu130torch211", "==2.11.*", None, frozenset(),
                         "x86_64", cpu_only=True)


def test_a_cpu_cell_links_torchs_cpu_libraries_alone() -> None:
    argv = link_command([Path("/o/a.o")], Path("/pkg/x.abi3.so"), CPU_TOOLCHAIN)
    assert argv[-3:] == ["-lc10", "-ltorch", "-ltorch_cpu"]
    assert not [arg for arg in argv if "cuda" in arg or "cudart" in arg]


def test_a_cpu_cell_compiles_with_no_cuda_headers() -> None:
    folders = torch_includes(CPU_TOOLCHAIN)
    assert TOOLCHAIN.cuda is not None and TOOLCHAIN.cuda.include not in folders
    assert TOOLCHAIN.cuda.include in torch_includes(TOOLCHAIN)


def cpu_report(needed: tuple[str, ...]) -> WheelReport:
    so = dataclasses.replace(SO, sass=(), ptx=(), needed=needed)
    return report(CPU_NAME, shared_objects=(so,))


def test_a_cpu_wheel_may_need_no_cuda_library() -> None:
    sound = cpu_report(("libc10.so", "libtorch_cpu.so", "libc.so.6"))
    assert [p for p in check_wheel(sound, CPU_EXPECT) if "libraries" in p] == []
    for library in ("libcudart.so.13", "libc10_cuda.so", "libtorch_cuda.so", "libcublas.so.13"):
        problems = check_wheel(cpu_report(("libc10.so", library)), CPU_EXPECT)
        assert f"libraries: {SO.path} needs {library}, a CUDA library, but it is a CPU build: " \
               "it must load with a CPU-only torch" in problems


def test_a_cpu_wheel_carries_no_gpu_code() -> None:
    with_code = report(CPU_NAME, shared_objects=(dataclasses.replace(
        SO, needed=("libc10.so",)),))
    problems = check_wheel(with_code, CPU_EXPECT)
    assert "GPU code: compute_90, sm_80, sm_90 not planned for this cell (PTX belongs only to " \
           "the newest SM)" in problems


def run_guard(code: str, version: str) -> None:
    torch = type("torch", (), {"__version__": version})
    exec(compile(code, "_ops.py", "exec"), {"torch": torch})


def test_a_cpu_wheels_guard_takes_any_build_of_its_torch() -> None:
    code = import_guard("img2gray", "1.0.0+cputorch211", "2.11", "", "cputorch{torch}",
                        index_url="https://kernels.example.org")
    for version in ("2.11.0+cpu", "2.11.0+cu130", "2.11.1"):
        run_guard(code, version)
    with pytest.raises(ImportError) as raised:
        run_guard(code, "2.12.0+cpu")
    assert str(raised.value) == (
        "img2gray 1.0.0+cputorch211 was built for torch 2.11 (its CPU ops), but this "
        "environment has torch 2.12.0+cpu. Install the img2gray wheel built for it, from the "
        "index https://kernels.example.org/cputorch212/simple, or install torch 2.11.")
