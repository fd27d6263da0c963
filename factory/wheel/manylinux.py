"""Which manylinux policy a shared object's symbol versions allow, judged with auditwheel's own
policy data (the glibc/libstdc++ symbol versions and system libraries of each manylinux_2_X)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from importlib.resources import files

_MANYLINUX_TAG = re.compile(r"manylinux_(\d+)_(\d+)_(\w+)")
_LEGACY_ALIASES = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
ARCHITECTURES = {"EM_X86_64": "x86_64", "EM_AARCH64": "aarch64"}


@dataclass(frozen=True)
class Policy:
    name: str  # manylinux_2_28, or "linux" when no manylinux policy fits
    glibc: tuple[int, int] | None
    priority: int
    symbol_versions: dict[str, frozenset[str]]  # GLIBC -> {"2.2.5", ...}
    system_libraries: frozenset[str]

    def tag(self, arch: str) -> str:
        return f"{self.name}_{arch}"


@dataclass(frozen=True)
class SymbolVerdict:
    policy: Policy
    newest: dict[str, str]  # GLIBC -> "2.34": the newest version needed per symbol family

    def tag(self, arch: str) -> str:
        return self.policy.tag(arch)


@cache
def policies(arch: str) -> tuple[Policy, ...]:
    """The manylinux policies for one architecture, oldest (most compatible) first."""
    data = json.loads(files("auditwheel.policy").joinpath("manylinux-policy.json").read_text())
    found = []
    for entry in data:
        versions = entry["symbol_versions"].get(arch, {})
        match = re.fullmatch(r"manylinux_(\d+)_(\d+)", entry["name"])
        found.append(Policy(
            entry["name"], (int(match[1]), int(match[2])) if match else None, entry["priority"],
            {family: frozenset(names) for family, names in versions.items()},
            frozenset(entry["lib_whitelist"]),
        ))
    return tuple(sorted(found, key=lambda policy: -policy.priority))


def system_libraries(arch: str) -> frozenset[str]:
    """Libraries every manylinux system provides (libc, libm, libstdc++, libgcc_s, ...)."""
    manylinux = [policy for policy in policies(arch) if policy.glibc is not None]
    return frozenset.intersection(*(policy.system_libraries for policy in manylinux))


def judge_symbols(version_needs: dict[str, tuple[str, ...]], arch: str) -> SymbolVerdict:
    """The oldest manylinux policy that provides every symbol version the object needs from
    the system libraries; policy "linux" when none does."""
    system = system_libraries(arch)
    needs: dict[str, set[str]] = {}
    for library, names in version_needs.items():
        if library not in system:
            continue
        for name in names:
            family, _, version = name.partition("_")
            if version:
                needs.setdefault(family, set()).add(version)
    newest = {family: max(versions, key=_version_key) for family, versions in sorted(needs.items())}
    for policy in policies(arch):
        if policy.glibc is None:
            continue
        if all(family not in policy.symbol_versions or versions <= policy.symbol_versions[family]
               for family, versions in needs.items()):
            return SymbolVerdict(policy, newest)
    base = next(policy for policy in policies(arch) if policy.glibc is None)
    return SymbolVerdict(base, newest)


def tag_glibc(platform_tag: str) -> tuple[int, int] | None:
    """(2, 28) for manylinux_2_28_x86_64 (and the legacy aliases); None for other tags."""
    match = _MANYLINUX_TAG.fullmatch(platform_tag)
    if match:
        return int(match[1]), int(match[2])
    for alias, glibc in _LEGACY_ALIASES.items():
        if platform_tag.startswith(alias + "_"):
            return glibc
    return None


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else 0 for part in version.split("."))
