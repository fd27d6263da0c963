"""Which manylinux policy a shared object allows, judged by auditwheel's own policy API: the
glibc/libstdc++ symbol versions each manylinux_2_X provides (versioned_symbols_policy), the
system libraries it may need, and the symbols of those libraries no manylinux policy allows
(a policy's blacklist, such as zlib's internal _tr_flush_block)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from auditwheel.architecture import Architecture
from auditwheel.elfutils import filter_undefined_symbols
from auditwheel.libc import Libc
from auditwheel.policy import Policy, WheelPolicies

__all__ = ["ARCHITECTURES", "GLIBC_LOADERS", "SymbolVerdict", "judge_object", "system_libraries",
           "tag_glibc"]

_MANYLINUX = re.compile(r"manylinux_(\d+)_(\d+)")
_LEGACY_ALIASES = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
ARCHITECTURES = {"EM_X86_64": "x86_64", "EM_AARCH64": "aarch64"}
# glibc's dynamic loader, part of glibc itself: an object links it directly when it calls into
# it (__tls_get_addr, or _dl_find_object from gcc 13's unwinder on glibc 2.35 and newer).
# auditwheel leaves it out of its policies' library lists and accepts it the same way.
GLIBC_LOADERS = {"x86_64": "ld-linux-x86-64.so.2", "aarch64": "ld-linux-aarch64.so.1"}


@dataclass(frozen=True)
class SymbolVerdict:
    name: str  # manylinux_2_28, or "linux" when no manylinux policy fits
    glibc: tuple[int, int] | None
    newest: dict[str, str]  # GLIBC -> "2.34": the newest version needed per symbol family
    blacklisted: dict[str, tuple[str, ...]]  # library -> its symbols no manylinux policy allows


@cache
def _policies(arch: str) -> WheelPolicies:
    return WheelPolicies(libc=Libc.GLIBC, arch=Architecture(arch))


def system_libraries(arch: str) -> frozenset[str]:
    """Libraries every manylinux system provides (libc, libm, libstdc++, libgcc_s, ...): the
    oldest policy's, which every later policy keeps (PEP 600)."""
    whitelist: frozenset[str] = _policies(arch).lowest.whitelist
    return whitelist


def judge_object(path: Path, needed: tuple[str, ...],
                 version_needs: dict[str, tuple[str, ...]], arch: str) -> SymbolVerdict:
    """The most compatible manylinux policy whose symbol versions cover what the object needs
    from the system libraries and whose blacklist it does not touch; "linux" when none does."""
    policies = _policies(arch)
    system = system_libraries(arch)
    needs = {library: set(names) for library, names in version_needs.items() if library in system}
    by_symbols = policies.versioned_symbols_policy(needs)
    blacklisted: dict[str, tuple[str, ...]] = {}
    allowed: list[Policy] = []
    for policy in policies:
        if policy == policies.linux:
            continue
        touched = filter_undefined_symbols(path, {library: symbols for library, symbols
                                                  in policy.blacklist.items()
                                                  if library in needed})
        if touched:
            for library, symbols in touched.items():
                blacklisted[library] = tuple(sorted(set(blacklisted.get(library, ()))
                                                    | set(symbols)))
        else:
            allowed.append(policy)
    by_blacklist = max(allowed, default=policies.linux)
    chosen = min(by_symbols, by_blacklist)
    name = chosen.name.removesuffix(f"_{policies.architecture.baseline.value}")
    match = _MANYLINUX.fullmatch(name)
    return SymbolVerdict(name, (int(match[1]), int(match[2])) if match else None,
                         _newest(needs), blacklisted)


def _newest(needs: dict[str, set[str]]) -> dict[str, str]:
    versions: dict[str, set[str]] = {}
    for names in needs.values():
        for name in names:
            family, _, version = name.partition("_")
            if version:
                versions.setdefault(family, set()).add(version)
    return {family: max(found, key=_version_key) for family, found in sorted(versions.items())}


def tag_glibc(platform_tag: str) -> tuple[int, int] | None:
    """(2, 28) for manylinux_2_28_x86_64 (and the legacy aliases); None for other tags."""
    match = re.fullmatch(r"manylinux_(\d+)_(\d+)_\w+", platform_tag)
    if match:
        return int(match[1]), int(match[2])
    for alias, glibc in _LEGACY_ALIASES.items():
        if platform_tag.startswith(alias + "_"):
            return glibc
    return None


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else 0 for part in version.split("."))
