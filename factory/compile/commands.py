"""Compiler and linker command lines for one cell, with the effective flags a kernel-builder
build of the kernel gets through CMake:

- every unit the plan lists (the [torch] binding and the sources of the cell's CUDA
  [kernel.*] sections), each with its section's include folders and flags (cuda-flags for .cu
  files, cxx-flags for C++ files) and the header folders of its `depends`;
- CMake's Release flags (-O3 -DNDEBUG, -fPIC); C++ files in the GNU dialect of torch's
  standard (CMake's default, -std=gnu++17), CUDA files in the standard itself;
- for CUDA files, the flags torch's CMake config and kernel-builder add (policy.nvcc_flags:
  --expt-relaxed-constexpr, --expt-extended-lambda, -DENABLE_FP8, ...);
- for every file, the compile definitions torch's CMake targets carry (read from the torch
  built against), TORCH_EXTENSION_NAME set to the op namespace, CUDA_KERNEL and USE_CUDA,
  torch's C++ ABI and Python's limited API 3.9;
- the unit's own flags as the cell's toolchain rules have them (config/rules.py: a C++ standard
  raised for a torch that needs it, say);
- -gencode for the archs the plan chose per section, PTX where it said so;
- the torch environment and the toolkit mapped to fixed names in what the objects record
  (-ffile-prefix-map), the compilers' random names seeded by the unit (-frandom-seed, where
  nvcc takes it), and a dependency file per unit (-MD) listing every file it read, which the
  object cache keys the object with;
- one shared object `<namespace>.abi3.so` linked against torch and the CUDA runtime (for a
  free-threaded CPython, `<namespace>.cpython-314t-<platform>-linux-gnu.so`, no limited API).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..config.model import CompressMode
from ..data.compilers.rewrite import Change, rewrite
from ..errors import BuildError
from ..plan.model import CUDA_SUFFIXES, CXX_SUFFIXES, Cell, Unit
from ..policy import nvcc_flags
from ..policy.capabilities import Capability
from ..toolchain import Toolchain
from ..values.versions import Version
from .deps import dependency_includes, torch_includes

__all__ = ["CompileJob", "compile_jobs", "compression_flags", "extension_suffix", "gencode_flags",
           "gpu_targets", "link_command", "python_tags"]

LIMITED_API = "0x03090000"  # CPython 3.9: one abi3 wheel serves 3.9 and every later version
TORCH_CPU_LIBRARIES = ("c10", "torch", "torch_cpu")
TORCH_LIBRARIES = (*TORCH_CPU_LIBRARIES, "c10_cuda", "torch_cuda")


@dataclass(frozen=True)
class CompileJob:
    """One compiler run: its command line (nvcc's --threads is chosen when it starts), the
    object it writes and the dependency file that lists every file it read."""

    unit: Unit
    object: Path
    depfile: Path
    argv: tuple[str, ...]
    cwd: Path  # the repo's copy: relative paths in a build.toml's flags are the repo's
    changes: tuple[Change, ...] = ()  # what the cell's toolchain rules changed in its flags

    @property
    def source(self) -> str:  # repo-relative, for messages
        return self.unit.source

    @property
    def threads_useful(self) -> int:
        """How many threads the compiler can use: nvcc compiles each arch on its own."""
        return len(self.unit.archs) if self.unit.is_cuda else 1

    def command(self, threads: int = 1) -> list[str]:
        threads = min(threads, self.threads_useful)
        return [self.argv[0], *([f"--threads={threads}"] if threads > 1 else []),
                *self.argv[1:]]


def compile_jobs(cell: Cell, toolchain: Toolchain, work: Path) -> list[CompileJob]:
    """The compiler runs of a cell built in `work` (the repo's copy in work/src, objects in
    work/obj)."""
    src_root, obj_root = work / "src", work / "obj"
    jobs = []
    for unit in cell.units:
        if not unit.compiled:
            continue
        suffix = PurePosixPath(unit.source).suffix.lower()
        obj = obj_root / unit.section / (unit.source + ".o")
        depfile = obj.with_suffix(".d")
        if suffix in CUDA_SUFFIXES:
            if toolchain.cuda is None:
                raise BuildError(f"{unit.source}: a CPU cell compiles no CUDA file, and "
                                 f"[kernel.{unit.section}] of its CPU backend lists one")
            flags, changes = _ruled(cell, unit, unit.cuda_flags, nvcc=True)
            argv = _nvcc(cell, toolchain, unit, work, obj, flags)
        elif suffix in CXX_SUFFIXES:
            flags, changes = _ruled(cell, unit, unit.cxx_flags, nvcc=False)
            argv = _cxx(cell, toolchain, unit, work, obj, flags)
        else:
            raise BuildError(f"{unit.source}: the factory does not know how to compile "
                             f"'{suffix}' files in a CUDA build")
        argv += ["-MD", "-MF", str(depfile)]
        jobs.append(CompileJob(unit, obj, depfile, tuple(argv), src_root, tuple(changes)))
    return jobs


def _ruled(cell: Cell, unit: Unit, flags: tuple[str, ...],
           nvcc: bool) -> tuple[list[str], list[Change]]:
    """A unit's own flags (build.toml's cxx-flags or cuda-flags) as the cell's toolchain rules
    have them, and what they changed."""
    if not cell.rules:
        return list(flags), []
    return rewrite(flags, [rule.to_json() for rule in cell.rules], gpu_targets(unit.archs),
                   nvcc)


def gpu_targets(archs: Iterable[Capability]) -> list[str]:
    """The GPU code names of `archs` as -gencode writes them: sm_90, and compute_90 for PTX."""
    return [name for cap in archs
            for name in (f"sm_{cap.arch}", *([f"compute_{cap.arch}"] if cap.ptx else []))]


def gencode_flags(archs: Iterable[Capability]) -> list[str]:
    flags = []
    for cap in sorted(archs):
        flags.append(f"-gencode=arch=compute_{cap.arch},code=sm_{cap.arch}")
        if cap.ptx:
            flags.append(f"-gencode=arch=compute_{cap.arch},code=compute_{cap.arch}")
    return flags


def compression_flags(mode: CompressMode | None, cuda: Version) -> list[str]:
    """nvcc's flags for compressing the GPU code it embeds (the driver inflates it when the
    module loads). CUDA 13's nvcc compresses every entry with `--compress-mode=size`; `balance`
    and `speed` compress only small entries unless -compress-all asks for every one. A CUDA 12
    cell gets fatbinary's -compress-all alone, whose format every CUDA 12 driver reads (the
    newer modes need a newer driver than the CUDA 12 minimum). None: no flag, as wheels built
    before the setting existed were."""
    if mode is None:
        return []
    if cuda.major < 13:
        return [] if mode == "none" else ["-Xfatbin=-compress-all"]
    if mode in ("none", "size"):
        return [f"--compress-mode={mode}"]
    return ["-Xfatbin=-compress-all", f"--compress-mode={mode}"]


def link_command(objects: list[Path], output: Path, toolchain: Toolchain) -> list[str]:
    """The link of the cell's shared object, against torch and the CUDA runtime: the
    toolkit's, or for another platform the one torch's nvidia-* wheels hold (named by its
    file: those wheels have no unversioned libcudart.so)."""
    if toolchain.cuda is None:  # a CPU cell: torch's CPU libraries alone
        return [toolchain.cxx, "-shared", "-o", str(output), *[str(obj) for obj in objects],
                f"-L{toolchain.torch.lib_dir}", "-Wl,--as-needed",
                *[f"-l{lib}" for lib in TORCH_CPU_LIBRARIES]]
    runtime = toolchain.torch.cuda_runtime
    cudart = [f"-L{runtime.parent}", f"-l:{runtime.name}"] if runtime else \
        [f"-L{toolchain.cuda.lib}", "-lcudart"]
    return [
        toolchain.cxx, "-shared", "-o", str(output), *[str(obj) for obj in objects],
        f"-L{toolchain.torch.lib_dir}", *cudart[:-1],
        "-Wl,--as-needed", *[f"-l{lib}" for lib in TORCH_LIBRARIES], cudart[-1],
    ]


def extension_suffix(cell: Cell) -> str:
    """The file name ending of a kernel-builder cell's shared object: .abi3.so, or for a
    free-threaded CPython (which loads no abi3 module) its own:
    .cpython-314t-x86_64-linux-gnu.so."""
    if cell.python is None or not cell.free_threaded:
        return ".abi3.so"
    return f".cpython-{cell.python.major}{cell.python.minor}t-{cell.platform}-linux-gnu.so"


def python_tags(cell: Cell) -> str:
    """The Python and ABI tags of a kernel-builder cell's wheel: cp39-abi3, or cp314-cp314t."""
    if cell.python is None or not cell.free_threaded:
        return "cp39-abi3"
    return f"{cell.python.interpreter_tag}-{cell.python.abi_tag}"


def _defines(cell: Cell, toolchain: Toolchain) -> list[str]:
    defines = [
        f"-DTORCH_EXTENSION_NAME={cell.ops_namespace}",
        # the free-threaded build has no limited API (PEP 703)
        *([] if cell.free_threaded else [f"-DPy_LIMITED_API={LIMITED_API}"]),
        *(["-DCPU_KERNEL"] if cell.backend == "cpu" else ["-DCUDA_KERNEL", "-DUSE_CUDA=1"]),
        *[f"-D{definition}" for definition in toolchain.torch.definitions],
        f"-D_GLIBCXX_USE_CXX11_ABI={1 if toolchain.torch.cxx11_abi else 0}",
    ]
    stable = cell.stable_abi
    if stable is not None:
        # torch's encoding of a target version: major in the top byte, minor in the next.
        value = (stable.major << 56) | (stable.minor << 48)
        defines.append(f"-DTORCH_TARGET_VERSION={value:#x}")
    return defines


def _includes(unit: Unit, toolchain: Toolchain, src_root: Path) -> list[str]:
    own = [src_root / folder for folder in unit.include]
    if (src_root / "csrc").is_dir():
        own.append(src_root / "csrc")
    system = [*dependency_includes(toolchain), *torch_includes(toolchain)]
    return [f"-I{path}" for path in own] + \
        [arg for path in system for arg in ("-isystem", str(path))]


def _prefix_maps(toolchain: Toolchain) -> list[str]:
    """Host paths that headers bring into the object (through __FILE__ in torch's checks),
    rewritten to fixed names so the output does not depend on where the cache is. (The
    build folder cannot be mapped away: nvcc names a file's internal-linkage symbols after a
    hash of its physical path.)"""
    cuda = [f"-ffile-prefix-map={toolchain.cuda.home}=/cuda"] if toolchain.cuda else []
    return [f"-ffile-prefix-map={toolchain.torch.root}=/torch-env", *cuda]


def _seed(unit: Unit) -> str:
    """The seed of the names a compiler would otherwise draw at random (cudafe's for unnamed
    namespaces take its process id), one per unit as the compilers ask: its source's path in
    the repo. nvcc hands it on to the host compiler."""
    return f"-frandom-seed={unit.source}"


def _cxx(cell: Cell, toolchain: Toolchain, unit: Unit, work: Path, obj: Path,
         flags: list[str]) -> list[str]:
    src_root = work / "src"
    return [
        toolchain.cxx, "-c", str(src_root / unit.source), "-o", str(obj),
        f"-std=gnu++{toolchain.cxx_std}", "-O3", "-DNDEBUG", "-fPIC", "-fno-gnu-unique",
        _seed(unit), *_prefix_maps(toolchain), *_defines(cell, toolchain),
        *_includes(unit, toolchain, src_root), *flags,
    ]


def _nvcc(cell: Cell, toolchain: Toolchain, unit: Unit, work: Path, obj: Path,
          cuda_flags: list[str]) -> list[str]:
    src_root = work / "src"
    assert toolchain.cuda is not None  # compile_jobs refuses CUDA files of CPU cells
    if toolchain.cuda.version < Version("12.8"):
        cuda_flags = [flag for flag in cuda_flags
                      if not flag.startswith("-static-global-template-stub")]
    return [
        str(toolchain.cuda.nvcc), "-c", str(src_root / unit.source), "-o", str(obj),
        f"-ccbin={toolchain.cxx}", f"-std=c++{toolchain.cxx_std}", "-O3", "-DNDEBUG",
        "-Xcompiler=-fPIC", "-Xcompiler=-fno-gnu-unique",
        # Intermediate files next to the object, named after it: in /tmp they get a random
        # name, which nvcc writes into the object. (--threads does not change the output.)
        "--objdir-as-tempdir", *([_seed(unit)] if toolchain.cuda.seeds else []),
        *[f"-Xcompiler={flag}" for flag in _prefix_maps(toolchain)], *nvcc_flags(),
        *gencode_flags(unit.archs), *compression_flags(cell.compress, toolchain.cuda.version),
        *_defines(cell, toolchain),
        *_includes(unit, toolchain, src_root), *cuda_flags,
    ]
