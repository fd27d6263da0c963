"""Facts about CUDA toolkits and PyTorch releases, kept as data in factory/data/*.toml."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources

from .versions import Version


@dataclass(frozen=True)
class CudaPolicy:
    """What one range of CUDA toolkit versions can compile for."""

    since: Version
    sms: tuple[Version, ...]
    arch_specific: frozenset[Version]
    family_specific: frozenset[Version]
    default: tuple[Version, ...]
    pypi: bool


@dataclass(frozen=True)
class TorchRelease:
    """A PyTorch minor release: the CUDA version of its PyPI build, its C++ standard."""

    version: Version
    pypi_cuda: Version
    cxx_std: str


def _load(name: str) -> dict:
    return tomllib.loads(resources.files("factory.data").joinpath(name).read_text("utf-8"))


def _versions(items: list[str]) -> tuple[Version, ...]:
    return tuple(Version.parse(item) for item in items)


@cache
def cuda_policies() -> tuple[CudaPolicy, ...]:
    entries = []
    for entry in _load("cuda.toml")["cuda"]:
        entries.append(CudaPolicy(
            since=Version.parse(entry["since"]),
            sms=_versions(entry["sms"]),
            arch_specific=frozenset(_versions(entry["arch-specific"])),
            family_specific=frozenset(_versions(entry["family-specific"])),
            default=_versions(entry["default"]),
            pypi=entry["pypi"],
        ))
    return tuple(sorted(entries, key=lambda policy: policy.since))


def cuda_policy(version: Version) -> CudaPolicy | None:
    """The policy for a CUDA version, or None when the factory does not know it (too old)."""
    found = None
    for policy in cuda_policies():
        if version >= policy.since:
            found = policy
    return found


def known_sms() -> tuple[Version, ...]:
    """Every SM any known toolkit compiles for: the set a build.toml capability must come from."""
    return tuple(sorted({sm for policy in cuda_policies() for sm in policy.sms}))


@cache
def torch_releases() -> dict[Version, TorchRelease]:
    releases = {}
    for text, entry in _load("torch.toml")["torch"].items():
        version = Version.parse(text)
        releases[version] = TorchRelease(version, Version.parse(entry["pypi-cuda"]),
                                         entry["cxx-std"])
    return releases


def torch_release(version: Version) -> TorchRelease | None:
    return torch_releases().get(version.major_minor())
