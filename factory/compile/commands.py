"""Compiler and linker command lines for one cell, the way kernel-builder compiles a kernel:

- every [torch] source and every source of the cell's CUDA [kernel.*] sections, each section
  with its own include folders and flags (cuda-flags for .cu files, cxx-flags for C++ files);
- TORCH_EXTENSION_NAME set to the op namespace, CUDA_KERNEL defined, Python's limited API 3.9;
- -gencode for the SMs the plan chose per section, PTX where it said so;
- one shared object `<namespace>.abi3.so` linked against torch and the CUDA runtime.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..capabilities import Capability, gencode_flags
from ..errors import BuildError
from ..matrix.plan import Cell
from ..policy import torch_release
from ..toolchain.cuda import CudaToolkit
from ..toolchain.torchenv import TorchEnv
from ..versions import Version

CUDA_SUFFIXES = frozenset({".cu"})
CXX_SUFFIXES = frozenset({".cpp", ".cc", ".cxx", ".c++", ".c"})
HEADER_SUFFIXES = frozenset({".h", ".hh", ".hpp", ".hxx", ".cuh", ".inc", ".inl", ".tcc", ".ipp"})
LIMITED_API = "0x03090000"  # CPython 3.9: one abi3 wheel serves 3.9 and every later version
TORCH_LIBRARIES = ("c10", "torch", "torch_cpu", "c10_cuda", "torch_cuda")


@dataclass(frozen=True)
class Toolchain:
    cuda: CudaToolkit
    torch: TorchEnv
    cxx: str  # the host C++ compiler
    cxx_std: str


@dataclass(frozen=True)
class CompileJob:
    source: str  # repo-relative, for messages
    object: Path
    argv: tuple[str, ...]


@dataclass(frozen=True)
class _Unit:
    section: str
    source: str
    include: tuple[str, ...]
    cxx_flags: tuple[str, ...]
    cuda_flags: tuple[str, ...]
    archs: tuple[Capability, ...]


def host_compiler() -> str:
    """The C++ compiler for host code and for nvcc's host side: $CXX, else g++."""
    return os.environ.get("CXX", "g++")


def cxx_standard(torch: Version) -> str:
    release = torch_release(torch)
    return release.cxx_std if release else "20"


def compile_jobs(cell: Cell, toolchain: Toolchain, src_root: Path, obj_root: Path,
                 threads: int = 1) -> list[CompileJob]:
    jobs = []
    for unit in _units(cell):
        suffix = PurePosixPath(unit.source).suffix.lower()
        if suffix in HEADER_SUFFIXES:
            continue
        obj = obj_root / unit.section / (unit.source + ".o")
        if suffix in CUDA_SUFFIXES:
            argv = _nvcc(cell, toolchain, unit, src_root, obj, threads)
        elif suffix in CXX_SUFFIXES:
            argv = _cxx(cell, toolchain, unit, src_root, obj)
        else:
            raise BuildError(f"{unit.source}: the factory does not know how to compile "
                             f"'{suffix}' files in a CUDA build")
        jobs.append(CompileJob(unit.source, obj, tuple(argv)))
    return jobs


def cuda_archs(cell: Cell) -> set[Capability]:
    """Every architecture some CUDA source of the cell is compiled for."""
    return {cap for unit in _units(cell)
            if PurePosixPath(unit.source).suffix.lower() in CUDA_SUFFIXES for cap in unit.archs}


def link_command(objects: list[Path], output: Path, toolchain: Toolchain) -> list[str]:
    return [
        toolchain.cxx, "-shared", "-o", str(output), *[str(obj) for obj in objects],
        f"-L{toolchain.torch.lib_dir}", f"-L{toolchain.cuda.lib}",
        "-Wl,--as-needed", *[f"-l{lib}" for lib in TORCH_LIBRARIES], "-lcudart",
    ]


def _units(cell: Cell) -> list[_Unit]:
    spec = cell.spec
    units = []
    if spec.torch is not None:
        for source in spec.torch.src:
            units.append(_Unit("torch", source, spec.torch.include, spec.torch.cxx_flags, (),
                               cell.sms))
    sections = {section.name: section for section in spec.kernels_for("cuda")}
    for plan in cell.sections:
        if plan.skipped:
            continue
        section = sections[plan.name]
        for source in section.src:
            units.append(_Unit(section.name, source, section.include, section.cxx_flags,
                               section.cuda_flags, plan.archs))
    return units


def _defines(cell: Cell, toolchain: Toolchain) -> list[str]:
    defines = [
        f"-DTORCH_EXTENSION_NAME={cell.ops_namespace}",
        f"-DPy_LIMITED_API={LIMITED_API}",
        "-DCUDA_KERNEL", "-DUSE_CUDA=1",
        f"-D_GLIBCXX_USE_CXX11_ABI={1 if toolchain.torch.cxx11_abi else 0}",
    ]
    stable = cell.spec.torch.stable_abi_for("cuda") if cell.spec.torch else None
    if stable is not None:
        # torch's encoding of a target version: major in the top byte, minor in the next.
        value = (stable.major << 56) | (stable.minor << 48)
        defines.append(f"-DTORCH_TARGET_VERSION={value:#x}")
    return defines


def _includes(unit: _Unit, toolchain: Toolchain, src_root: Path) -> list[str]:
    own = [src_root / folder for folder in unit.include]
    if (src_root / "csrc").is_dir():
        own.append(src_root / "csrc")
    system = [*toolchain.torch.include_dirs, toolchain.torch.python_include,
              toolchain.cuda.include, *toolchain.torch.cuda_library_includes]
    return [f"-I{path}" for path in own] + [arg for path in system for arg in ("-isystem", str(path))]


def _prefix_maps(toolchain: Toolchain) -> list[str]:
    """Host paths that headers bring into the object (through __FILE__ in torch's checks),
    rewritten to fixed names so the output does not depend on where the cache is."""
    return [f"-ffile-prefix-map={toolchain.torch.root}=/torch-env",
            f"-ffile-prefix-map={toolchain.cuda.home}=/cuda"]


def _cxx(cell: Cell, toolchain: Toolchain, unit: _Unit, src_root: Path, obj: Path) -> list[str]:
    return [
        toolchain.cxx, "-c", str(src_root / unit.source), "-o", str(obj),
        f"-std=c++{toolchain.cxx_std}", "-O3", "-DNDEBUG", "-fPIC", "-fno-gnu-unique",
        *_prefix_maps(toolchain), *_defines(cell, toolchain),
        *_includes(unit, toolchain, src_root), *unit.cxx_flags,
    ]


def _nvcc(cell: Cell, toolchain: Toolchain, unit: _Unit, src_root: Path, obj: Path,
          threads: int) -> list[str]:
    cuda_flags = list(unit.cuda_flags)
    if toolchain.cuda.version < Version((12, 8)):
        cuda_flags = [flag for flag in cuda_flags
                      if not flag.startswith("-static-global-template-stub")]
    parallel = min(threads, len(unit.archs))
    return [
        str(toolchain.cuda.nvcc), "-c", str(src_root / unit.source), "-o", str(obj),
        f"-ccbin={toolchain.cxx}", f"-std=c++{toolchain.cxx_std}", "-O3", "-DNDEBUG",
        "-Xcompiler=-fPIC", "-Xcompiler=-fno-gnu-unique",
        # Intermediate files next to the object, named after it: in /tmp they get a random
        # name, which nvcc writes into the object.
        "--objdir-as-tempdir",
        *[f"-Xcompiler={flag}" for flag in _prefix_maps(toolchain)], "--expt-relaxed-constexpr",
        "-DENABLE_FP8", *([f"--threads={parallel}"] if parallel > 1 else []),
        *gencode_flags(unit.archs), *_defines(cell, toolchain),
        *_includes(unit, toolchain, src_root), *cuda_flags,
    ]
