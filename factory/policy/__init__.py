"""What the factory knows of CUDA toolkits and PyTorch releases, kept as data in
factory/data/cuda.toml and torch.toml and read into frozen values."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from ..versions import Version, major_minor, parse_release

__all__ = ["CudaPolicy", "TorchRelease", "cuda_policies", "cuda_policy", "cuda_releases",
           "known_sms", "torch_release", "torch_releases"]


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
    """A PyTorch minor release: the CUDA version of its PyPI build, its C++ standard."""

    version: Version
    pypi_cuda: Version
    cxx_std: str


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
                                         entry["cxx-std"])
    return releases


def torch_release(version: Version) -> TorchRelease | None:
    return torch_releases().get(major_minor(version))
