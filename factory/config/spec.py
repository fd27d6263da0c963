"""The frozen form every build.toml dialect is read into: a kernel-builder repo's spec."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..policy.capabilities import Capability
from ..values.versions import Version
from .cutile import CutileKernel

__all__ = ["BACKENDS", "BACKEND_PYTHON_DEPENDS", "GENERAL_PYTHON_DEPENDS", "PROJECT_KINDS",
           "Framework", "KernelSection", "KernelSpec", "NoarchSection", "ProjectKind",
           "TorchSection"]

Framework = Literal["torch", "torch-noarch", "tvm-ffi"]
# The kinds of kernel project (each one package of cells/kinds/): a kernel-builder repo that
# compiles, a kernel-builder repo of pure Python ("noarch", its [torch-noarch] found by reading
# build.toml), a PEP 517 project, and a PEP 517 project whose kernels are cuTile-Python
# functions it declares ("cutile", found by reading the project). The matrix states only the
# first and third: the form of the files.
ProjectKind = Literal["kernel-builder", "noarch", "pep517", "cutile"]
PROJECT_KINDS: tuple[str, ...] = ("kernel-builder", "pep517")

BACKENDS = ("cann", "cpu", "cuda", "metal", "neuron", "rocm", "tpu", "xpu")

# build.toml `python-depends` names and the pip requirements they stand for.
GENERAL_PYTHON_DEPENDS = {"einops": "einops", "helion": "helion", "tvm-ffi": "apache-tvm-ffi"}
BACKEND_PYTHON_DEPENDS = {
    "cuda": {"nvidia-cutlass-dsl": "nvidia-cutlass-dsl"},
    "neuron": {"nki": "nki"},
    "xpu": {"onednn": "onednn-devel"},
    "cpu": {}, "metal": {}, "rocm": {}, "tpu": {}, "cann": {},
}


# Python dependencies with a build of their own per CUDA major, asked for with an extra
# (nvidia-cutlass-dsl pulls its CUDA 12 libraries unless `cu13` is asked for).
CUDA_MAJOR_EXTRAS = {"nvidia-cutlass-dsl": {13: "cu13"}}
# python-depends whose code compiles GPU code when the kernel runs (CuTe DSL, TVM FFI's JIT).
RUNTIME_COMPILERS = ("nvidia-cutlass-dsl", "tvm-ffi")


# Where each backend's kernels run (sys_platform values): what a noarch wheel's markers say.
_BACKEND_PLATFORMS = {"cuda": {"linux", "win32"}, "rocm": {"linux"}, "xpu": {"linux", "win32"},
                      "metal": {"darwin"}, "neuron": {"linux"}, "tpu": {"linux"},
                      "cann": {"linux"}, "cpu": {"linux", "win32", "darwin"}}


def _for_cuda(requirement: str, cuda_major: int | None) -> str:
    extra = CUDA_MAJOR_EXTRAS.get(requirement, {}).get(cuda_major or 0)
    return f"{requirement}[{extra}]" if extra else requirement


def _platforms(backends: tuple[str, ...]) -> set[str]:
    return set().union(*(_BACKEND_PLATFORMS[backend] for backend in backends))


@dataclass(frozen=True)
class TorchSection:
    """[torch]: the extension's binding sources and the torch versions it supports."""

    src: tuple[str, ...]
    include: tuple[str, ...]
    pyext: tuple[str, ...]
    minver: Version | None
    maxver: Version | None
    cxx_flags: tuple[str, ...]
    stable_abi: tuple[tuple[str, Version], ...]  # (backend, torch version); "*" = every backend

    def stable_abi_for(self, backend: str) -> Version | None:
        for name, version in self.stable_abi:
            if name in ("*", backend):
                return version
        return None


@dataclass(frozen=True)
class NoarchSection:
    """[torch-noarch]: a pure-Python kernel (one py3-none-any wheel)."""

    pyext: tuple[str, ...]
    cuda_capabilities: tuple[Capability, ...]


@dataclass(frozen=True)
class KernelSection:
    """One [kernel.NAME] table."""

    name: str
    backend: str
    src: tuple[str, ...]
    depends: tuple[str, ...]
    include: tuple[str, ...]
    cxx_flags: tuple[str, ...]
    cuda_capabilities: tuple[Capability, ...] | None  # None: not declared, use the cell's SMs
    cuda_flags: tuple[str, ...]
    cuda_minver: Version | None
    capabilities_line: int | None = None


@dataclass(frozen=True)
class KernelDepend:
    """A kernel another kernel loads (build.toml's kernel-depends): a Hub repo, at a major
    version or a revision."""

    repo_id: str
    version: int | None = None
    revision: str | None = None


@dataclass(frozen=True)
class KernelSpec:
    """Everything the factory needs from a kernel repo's build.toml, whatever its dialect."""

    root: Path
    build_toml: Path
    dialect: int
    name: str
    major_version: int | None
    license: str | None
    backends: tuple[str, ...]
    framework: Framework
    python_depends: tuple[str, ...]  # build.toml names, for every backend
    backend_python_depends: tuple[tuple[str, tuple[str, ...]], ...]  # [general.<backend>]
    cuda_minver: Version | None
    cuda_maxver: Version | None
    torch: TorchSection | None
    noarch: NoarchSection | None
    kernels: tuple[KernelSection, ...]
    warnings: tuple[str, ...] = ()
    # A PEP 517 project (setup.py / pyproject.toml, built by `build`): build_toml is then the
    # file its name was read from, and the compile is the project's own.
    kind: ProjectKind = "kernel-builder"
    limited_api: bool = False  # it declares py_limited_api: one abi3 wheel for every CPython
    static_version: str | None = None  # the version its files state without running anything
    test_requires: tuple[str, ...] = ()  # what its own tests need besides torch (flake.nix)
    cutile: tuple[CutileKernel, ...] = ()  # a cuTile project's declared kernels
    cutile_requirement: str | None = None  # its own requirement on cuda-tile
    # A PEP 517 project's [project] dependencies, where pyproject.toml states them (not dynamic)
    project_dependencies: tuple[str, ...] = ()
    upstream: str | None = None  # [general] upstream: the project the kernel comes from
    source_url: str | None = None  # [general] source: where the kernel's own source lives
    # [general] kernel-depends (under "") and each backend's ([general.cuda] ...)
    kernel_depends: tuple[tuple[str, tuple[KernelDepend, ...]], ...] = ()

    def kernel_depends_for(self, backend: str | None) -> tuple[KernelDepend, ...]:
        """The kernels a build for `backend` loads: the general ones and that backend's."""
        named = dict(self.kernel_depends)
        found = (*named.get("", ()), *(named.get(backend, ()) if backend else ()))
        return tuple(dict.fromkeys(found))

    @property
    def cuda_python_depends(self) -> tuple[str, ...]:
        return dict(self.backend_python_depends).get("cuda", ())

    def requirements(self, backend: str | None, cuda_major: int | None = None
                     ) -> tuple[str, ...]:
        """The Requires-Dist the python-depends names stand for, mapped as kernel-builder maps
        them. A build for one backend (`backend`) needs the general ones and that backend's. A
        noarch wheel (None) serves every backend of the kernel: a backend's dependencies are
        required where that backend can run, with a platform marker when the wheel also
        serves platforms it cannot run on (metal's on macOS only, CUDA's not there). A wheel
        for one CUDA major (`cuda_major`) asks for that major's build of a dependency that has
        one (nvidia-cutlass-dsl[cu13])."""
        found = [GENERAL_PYTHON_DEPENDS[name] for name in self.python_depends]
        served = _platforms(self.backends)
        for name, names in self.backend_python_depends:
            if backend is not None and name != backend:
                continue
            if backend is None and name not in self.backends:
                continue
            where = _platforms((name,)) & served
            marker = "" if backend is not None or where >= served else \
                "; " + " or ".join(f'sys_platform == "{p}"' for p in sorted(where))
            found += [_for_cuda(BACKEND_PYTHON_DEPENDS[name][item], cuda_major) + marker
                      for item in names]
        return tuple(dict.fromkeys(found))

    @property
    def runtime_compilers(self) -> tuple[str, ...]:
        """The python-depends of the kernel that compile GPU code when it runs."""
        named = (*self.python_depends, *self.cuda_python_depends)
        return tuple(name for name in RUNTIME_COMPILERS if name in named)

    @property
    def python_name(self) -> str:
        return self.name.replace("-", "_")

    def kernels_for(self, backend: str) -> tuple[KernelSection, ...]:
        return tuple(kernel for kernel in self.kernels if kernel.backend == backend)

    @property
    def package_dir(self) -> Path:
        """torch-ext/<python name>: the Python package the wheel ships."""
        return self.root / "torch-ext" / self.python_name
