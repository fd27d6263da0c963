"""What the factory knows of CUDA toolkits, PyTorch releases and the C++ dependencies of
kernels, kept as data in factory/data/cuda.toml, torch.toml and depends.toml and read into
frozen values."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from ..values.versions import Version, major_minor, parse_release

__all__ = ["CudaPolicy", "CxxStandard", "DependencyRelease", "TorchRelease", "cuda_policies",
           "cuda_policy", "cuda_releases", "cxx_standards", "dependency_release",
           "dependency_releases", "known_sms", "nvcc_flags", "torch_release", "torch_releases"]


@dataclass(frozen=True)
class CudaPolicy:
    """What one range of CUDA toolkit versions can compile for."""

    since: Version
    sms: tuple[Version, ...]
    arch_specific: frozenset[Version]
    family_specific: frozenset[Version]
    default: tuple[Version, ...]
    pypi: bool
    max_gcc: int  # the newest gcc major nvcc accepts as host compiler


@dataclass(frozen=True)
class TorchRelease:
    """A PyTorch minor release: the CUDA version of its PyPI build, the C++ standard
    extensions are compiled with and the one its headers demand, the CPythons it has wheels
    for ("3.14t": free-threaded)."""

    version: Version
    pypi_cuda: Version
    cxx_std: str
    pythons: tuple[str, ...] = ()
    header_std: str = "17"


@dataclass(frozen=True)
class CxxStandard:
    """What a compiler must give for one C++ standard: the __cplusplus value headers compare
    with, and the oldest g++ that sets it."""

    name: str  # "20"
    cplusplus: int
    gcc: int


def _load(name: str) -> dict[str, Any]:
    return tomllib.loads(resources.files("factory.data").joinpath(name).read_text("utf-8"))


def _versions(items: list[str]) -> tuple[Version, ...]:
    return tuple(parse_release(item) for item in items)


@cache
def cuda_policies() -> tuple[CudaPolicy, ...]:
    entries = []
    for entry in _load("cuda.toml")["cuda"]:
        entries.append(CudaPolicy(
            since=parse_release(entry["since"]),
            sms=_versions(entry["sms"]),
            arch_specific=frozenset(_versions(entry["arch-specific"])),
            family_specific=frozenset(_versions(entry["family-specific"])),
            default=_versions(entry["default"]),
            pypi=entry["pypi"],
            max_gcc=entry["max-gcc"],
        ))
    return tuple(sorted(entries, key=lambda policy: policy.since))


@cache
def cuda_releases() -> tuple[Version, ...]:
    """The CUDA releases (major.minor) that exist."""
    return tuple(sorted(_versions(_load("cuda.toml")["releases"])))


def cuda_policy(version: Version) -> CudaPolicy | None:
    """The policy for a CUDA version, or None when the factory does not know it (too old)."""
    found = None
    for policy in cuda_policies():
        if version >= policy.since:
            found = policy
    return found


@cache
def known_sms() -> tuple[Version, ...]:
    """Every SM any known toolkit compiles for: the set a build.toml capability must come from."""
    return tuple(sorted({sm for policy in cuda_policies() for sm in policy.sms}))


@cache
def torch_releases() -> dict[Version, TorchRelease]:
    releases = {}
    for text, entry in _load("torch.toml")["torch"].items():
        version = parse_release(text)
        releases[version] = TorchRelease(version, parse_release(entry["pypi-cuda"]),
                                         entry["cxx-std"], tuple(entry.get("pythons", ())),
                                         entry["header-std"])
    return releases


@cache
def cxx_standards() -> dict[str, CxxStandard]:
    return {name: CxxStandard(name, entry["cplusplus"], entry["gcc"])
            for name, entry in _load("torch.toml")["standard"].items()}


def torch_release(version: Version) -> TorchRelease | None:
    return torch_releases().get(major_minor(version))


@cache
def nvcc_flags() -> tuple[str, ...]:
    """The flags every CUDA unit gets from torch's CMake config and kernel-builder, in the
    order they reach nvcc, each once."""
    data = _load("torch.toml")
    return tuple(dict.fromkeys([*data["cmake-nvcc-flags"], *data["kernel-builder-nvcc-flags"]]))


@dataclass(frozen=True)
class DependencyRelease:
    """One `depends` name of build.toml: an exact release of a header library and where the
    factory takes it from by default."""

    name: str  # as build.toml writes it: cutlass_3_8
    project: str  # cutlass
    version: str  # 3.8.0
    git: str  # the project's repository
    tag: str  # the release's tag in it
    commit: str  # the commit the tag named when the table was written
    include: tuple[str, ...]  # header folders inside the git tree
    pypi: str | None  # the PyPI project that publishes this exact release, if one does
    wheel_version: str | None
    wheel_sha256: str | None
    wheel_root: str | None  # where the git tree's folders lie inside the wheel

    @property
    def default_origin(self) -> str:
        return "pypi" if self.pypi else "git"

    @property
    def default_location(self) -> str:
        """What names the default origin: the pinned PyPI requirement, else the repository."""
        return f"{self.pypi}=={self.wheel_version}" if self.pypi else self.git


@cache
def dependency_releases() -> dict[str, DependencyRelease]:
    data = _load("depends.toml")
    releases = {}
    for name, entry in data["depends"].items():
        project = data["project"][entry["project"]]
        wheel = entry.get("wheel")
        releases[name] = DependencyRelease(
            name=name, project=entry["project"], version=entry["version"], git=project["git"],
            tag=f"v{entry['version']}", commit=entry["commit"],
            include=tuple(project["include"]),
            pypi=project["pypi"] if wheel else None,
            wheel_version=wheel["version"] if wheel else None,
            wheel_sha256=wheel["sha256"] if wheel else None,
            wheel_root=project["wheel-root"] if wheel else None)
    return releases


def dependency_release(name: str) -> DependencyRelease | None:
    """The release a `depends` name stands for; None for torch and names with no provider."""
    return dependency_releases().get(name)
