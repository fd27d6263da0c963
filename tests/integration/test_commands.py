"""Compiler and linker command lines of a cell, against a toolchain that is only paths: what
each unit is compiled with, checked without running a compiler (but for one unit that real
nvcc compiles twice, to show its object does not change)."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from factory.compile.commands import compile_jobs
from factory.policy import nvcc_flags
from factory.sources.installed import probe_interpreter
from factory.system.process import Log
from factory.toolchain.cuda import provide_cuda

from ..support.checks import present
from ..support.plans import MATRIX, TOOLCHAIN, demo_plan, plan_for


def jobs_by_source(tmp_path: Path, threads: int = 1) -> tuple[Any, dict[str, Any]]:
    cell = next(c for c in plan_for(tmp_path, MATRIX).cells if str(c.torch) == "2.11")
    jobs = compile_jobs(cell, TOOLCHAIN, Path("/build"))
    return cell, {job.source: job.command(threads) for job in jobs}


def test_every_unit_but_headers_and_skipped_sections_is_compiled(tmp_path: Path) -> None:
    _, jobs = jobs_by_source(tmp_path)
    assert sorted(jobs) == ["arch/arch.cu", "blackwell/blackwell.cu", "offset/offset.cu",
                            "offset/offset_host.cpp", "scale/scale.cu",
                            "torch-ext/torch_binding.cpp"]


def test_each_section_gets_its_archs_and_its_own_flags(tmp_path: Path) -> None:
    cell, jobs = jobs_by_source(tmp_path)
    scale, offset, arch = jobs["scale/scale.cu"], jobs["offset/offset.cu"], jobs["arch/arch.cu"]
    assert [a for a in scale if a.startswith("-gencode")] == [
        f"-gencode=arch=compute_{sm},code=sm_{sm}" for sm in ("80", "86", "90", "100")]
    assert [a for a in offset if a.startswith("-gencode")] == [
        "-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90,code=sm_90",
        "-gencode=arch=compute_90,code=compute_90"]
    assert [a for a in arch if a.startswith("-gencode")] == [
        "-gencode=arch=compute_86,code=sm_86", "-gencode=arch=compute_90a,code=sm_90a"]
    assert "-DOFFSET_AMOUNT=3" in offset and "-DOFFSET_AMOUNT=3" not in scale
    host = jobs["offset/offset_host.cpp"]
    assert host[0] == "g++" and "-DOFFSET_HOST_CHECK=7" in host
    assert "-DOFFSET_AMOUNT=3" not in host and not any(a.startswith("-gencode") for a in host)
    for argv in jobs.values():
        assert f"-DTORCH_EXTENSION_NAME={cell.ops_namespace}" in argv
        assert "-DPy_LIMITED_API=0x03090000" in argv and "-D_GLIBCXX_USE_CXX11_ABI=1" in argv
        assert "-I/build/src/include" in argv
        assert "-ffile-prefix-map=/cache/envs/t=/torch-env" in " ".join(argv)
        depfile = argv[argv.index("-MF") + 1]
        assert "-MD" in argv and depfile == argv[argv.index("-o") + 1].removesuffix(".o") + ".d"


def test_nvcc_keeps_its_intermediates_beside_the_object_and_splits_its_threads(
        tmp_path: Path) -> None:
    _, one = jobs_by_source(tmp_path, threads=1)
    _, many = jobs_by_source(tmp_path, threads=16)
    scale = many["scale/scale.cu"]
    assert scale[0] == "/cache/cuda/13.0/nvidia/cu13/bin/nvcc"
    assert "--objdir-as-tempdir" in scale and "--expt-relaxed-constexpr" in scale
    assert "--threads=4" in scale  # four archs, never more threads than archs
    assert "--threads=2" in many["offset/offset.cu"]
    assert not any(a.startswith("--threads") for a in one["scale/scale.cu"])
    assert not any(a.startswith("--threads") for a in many["offset/offset_host.cpp"])
    assert scale[scale.index("-o") + 1] == "/build/obj/scale/scale/scale.cu.o"
    # the thread count is the one thing the scheduler adds: the rest is the same command
    assert [a for a in scale if not a.startswith("--threads")] == one["scale/scale.cu"]


def test_units_get_the_flags_a_kernel_builder_build_gets(tmp_path: Path) -> None:
    _, jobs = jobs_by_source(tmp_path)
    scale, host = jobs["scale/scale.cu"], jobs["offset/offset_host.cpp"]
    flags = list(nvcc_flags())
    at = scale.index(flags[0])
    assert scale[at:at + len(flags)] == flags  # in torch's order, each once
    assert {"--expt-extended-lambda", "--expt-relaxed-constexpr", "-DENABLE_FP8",
            "-DONNX_NAMESPACE=onnx_c2", "-Xcudafe"} <= set(flags)
    assert not any(flag.startswith("-D__CUDA_NO_HALF") for flag in scale)
    assert "-std=c++17" in scale and "-std=gnu++17" in host  # CMake's CXX dialect is GNU's
    for argv in (scale, host):
        assert "-DUSE_C10D_NCCL" in argv and "-DUSE_DISTRIBUTED" in argv
    assert not set(flags) & set(host)


def test_each_unit_seeds_the_compilers_names_with_its_own_path(tmp_path: Path) -> None:
    _, plain = jobs_by_source(tmp_path / "plain")
    assert not any(arg.startswith("-frandom-seed") for arg in plain["scale/scale.cu"])
    assert "-frandom-seed=offset/offset_host.cpp" in plain["offset/offset_host.cpp"]
    cell = next(c for c in plan_for(tmp_path, MATRIX).cells if str(c.torch) == "2.11")
    seeding = replace(TOOLCHAIN, cuda=replace(present(TOOLCHAIN.cuda), seeds=True))
    seeds = {job.source: [arg for arg in job.command(1) if arg.startswith("-frandom-seed")]
             for job in compile_jobs(cell, seeding, Path("/build"))}
    assert seeds["scale/scale.cu"] == ["-frandom-seed=scale/scale.cu"]
    assert len({tuple(found) for found in seeds.values()}) == len(seeds)  # one per unit


UNNAMED = """
#include <cuda/std/tuple>
template <int N> __global__ void pair(int* out) {
  auto both = cuda::std::make_tuple(N, 2);
  cuda::std::ignore = both;
  out[0] = cuda::std::get<1>(both);
}
template __global__ void pair<3>(int*);
"""


@pytest.mark.slow
def test_a_unit_compiled_twice_gives_the_same_bytes(tmp_path: Path, factory_cache: Path) -> None:
    """libcu++'s `ignore` lives in an unnamed namespace, which cudafe names after its own
    process id unless the unit seeds it: two runs of one command gave two objects."""
    cell = demo_plan(tmp_path / "plan").cells[0]
    with open(tmp_path / "cuda.log", "w") as handle:
        cuda = provide_cuda(Version("13.0"), None, factory_cache, Log(handle))
    assert cuda.seeds
    work = tmp_path / "work"
    shutil.copytree(cell.source.root, work / "src")
    (work / "src" / "k.cu").write_text(UNNAMED)
    (job,) = [job for job in compile_jobs(cell, replace(TOOLCHAIN, cuda=cuda), work)
              if job.source == "k.cu"]
    made = []
    for _ in range(2):
        job.object.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(job.command(1), cwd=job.cwd, check=True, capture_output=True)
        made.append(job.object.read_bytes())
        job.object.unlink()
    assert b"ignoreE" in made[0] and made[0] == made[1]


@pytest.mark.slow
def test_the_nvcc_flags_are_those_torchs_own_files_add(torch_venv: Path) -> None:
    """factory/data/torch.toml against the torch the tests install: what its CMake config
    appends to CUDA_NVCC_FLAGS outside the MSVC, debug and clang branches, and its
    COMMON_NVCC_FLAGS without the half-conversion defines kernel-builder removes."""
    (torch_dir,) = torch_venv.glob("lib/python3.*/site-packages/torch")
    cmake = (torch_dir / "share/cmake/Caffe2/public/cuda.cmake").read_text()
    diags = present(re.search(r"foreach\(diag ([^)]*)\)", cmake))[1].split()
    appended = re.findall(r'^list\(APPEND CUDA_NVCC_FLAGS "(--expt-[a-z-]+)"\)$', cmake, re.M)
    extension = (torch_dir / "utils/cpp_extension.py").read_text()
    common = ast.literal_eval(present(re.search(r"COMMON_NVCC_FLAGS = (\[[^\]]*\])",
                                                extension))[1])
    expected = ["-DONNX_NAMESPACE=onnx_c2", "-Xcudafe",
                ",".join(f"--diag_suppress={diag}" for diag in diags), *appended,
                *[flag for flag in common if not flag.startswith("-D__CUDA_NO_")], "-DENABLE_FP8"]
    assert list(nvcc_flags()) == list(dict.fromkeys(expected))
    assert 'list(APPEND CUDA_NVCC_FLAGS "-DONNX_NAMESPACE=onnx_c2")' in cmake
    targets = (torch_dir / "share/cmake/Caffe2/Caffe2Targets.cmake").read_text()
    probed = probe_interpreter(torch_venv / "bin" / "python", require_cuda=False)
    assert "USE_C10D_NCCL" in probed.definitions
    assert all(name in targets for name in probed.definitions)
