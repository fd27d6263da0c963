"""CUDA compute capabilities: parsing, checking against a toolkit, kernel-builder's loose
intersection."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Literal, cast

from ..values.versions import Version, compact
from . import CudaPolicy, known_sms

__all__ = ["Capability", "Variant", "check_supported", "known_sms_text", "loose_intersection",
           "with_ptx_for_newest"]

Variant = Literal["", "a", "f"]  # plain, arch-specific, family-specific
_CAPABILITY = re.compile(r"(\d+)\.(\d)([af]?)(\+PTX)?")


@dataclass(frozen=True, order=True)
class Capability:
    """One entry of a capability list: "8.0", "9.0a", "10.0f", "12.0+PTX"."""

    major: int
    minor: int
    variant: Variant = ""
    ptx: bool = False

    @classmethod
    def parse(cls, text: str) -> Capability:
        match = _CAPABILITY.fullmatch(text.strip())
        if not match:
            raise ValueError(f"'{text}' is not a compute capability like 8.0, 9.0a or 12.0+PTX")
        return cls(int(match.group(1)), int(match.group(2)), cast(Variant, match.group(3)),
                   bool(match.group(4)))

    @property
    def is_known(self) -> bool:
        return self.base in known_sms()

    @property
    def base(self) -> Version:
        return Version(f"{self.major}.{self.minor}")

    @property
    def arch(self) -> str:
        """The nvcc architecture suffix: 9.0a -> "90a"."""
        return f"{self.major}{self.minor}{self.variant}"

    def without_ptx(self) -> Capability:
        return replace(self, ptx=False)

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}{self.variant}{'+PTX' if self.ptx else ''}"


def known_sms_text() -> str:
    return ", ".join(str(sm) for sm in known_sms())


def check_supported(capability: Capability, policy: CudaPolicy, cuda: Version) -> str | None:
    """Why nvcc of this CUDA version cannot compile for the capability, or None when it can."""
    if capability.base not in policy.sms:
        supported = " ".join(str(sm) for sm in policy.sms)
        return (f"CUDA {cuda} cannot compile for sm_{compact(capability.base)} (it supports "
                f"{supported})")
    if capability.variant == "a" and capability.base not in policy.arch_specific:
        return f"CUDA {cuda} has no arch-specific variant sm_{capability.arch}"
    if capability.variant == "f" and capability.base not in policy.family_specific:
        return f"CUDA {cuda} has no family-specific variant sm_{capability.arch}"
    return None


def loose_intersection(declared: Iterable[Capability],
                       targets: Iterable[Version]) -> list[Capability]:
    """The architectures a kernel with `declared` capabilities is built for, given target SMs.

    kernel-builder's rule: for each target take the highest declared capability of the same
    major that is not above it (SASS runs forward within a major only); a capability marked
    +PTX may also serve targets of a later major. "X.Ya"/"X.Yf" variants are kept only where
    X.Y itself is a target, and that target is then served by the variant alone.
    """
    declared = list(declared)
    remaining = sorted(set(targets))
    ptx_requested = {cap.without_ptx() for cap in declared if cap.ptx}
    chosen: set[Capability] = set()

    for cap in declared:
        if cap.variant and cap.base in remaining:
            remaining.remove(cap.base)
            chosen.add(cap.without_ptx())

    plain = sorted({cap.without_ptx() for cap in declared if not cap.variant})
    for target in remaining:
        best = None
        for cap in plain:
            if cap.base > target:
                break
            if cap in ptx_requested or cap.major == target.major:
                best = cap
        if best is not None:
            chosen.add(best)

    return sorted(replace(cap, ptx=cap in ptx_requested) for cap in chosen)


def with_ptx_for_newest(sms: Iterable[Version], ptx: bool) -> list[Capability]:
    """A cell's own list: SASS for every SM, PTX for the newest (so newer GPUs can JIT it)."""
    ordered = sorted(set(sms))
    return [Capability(sm.major, sm.minor, "", ptx and sm == ordered[-1]) for sm in ordered]
