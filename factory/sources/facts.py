"""What planning needs to know of a kernel's files, read before it plans: the planner reads
nothing, so that every plan can be made, and tested, from values.

Read where a kernel's files are (pipeline/load.py after fetching, a builder container or
`factory verify` before decoding a cell record), by the same function, so that both sides of a
record plan alike.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..config.spec import KernelSpec
from .symbols import SourceSymbols, read_symbols

__all__ = ["NO_FACTS", "SourceFacts", "read_facts"]

_IMPORTS_TRITON = re.compile(r"^\s*(import|from)\s+triton\b", re.MULTILINE)


@dataclass(frozen=True)
class SourceFacts:
    """The sizes of the sources a build.toml names (the cost of a unit no build measured yet
    is estimated from them), the symbols of the CUDA sources when a section may be left out
    of a cell (None when none can), and whether a pure-Python package imports triton."""

    sizes: Mapping[str, int] = field(default_factory=dict)
    symbols: SourceSymbols | None = None
    imports_triton: bool = False


NO_FACTS = SourceFacts()


def read_facts(spec: KernelSpec) -> SourceFacts:
    """The facts of the kernel whose files are at spec.root."""
    sources = [*(spec.torch.src if spec.torch else ()),
               *(name for section in spec.kernels for name in section.src)]
    sizes: dict[str, int] = {}
    for name in sources:
        try:
            sizes[name] = (spec.root / name).stat().st_size
        except OSError:
            continue
    return SourceFacts(sizes, _symbols(spec), spec.noarch is not None and _imports_triton(spec))


def _symbols(spec: KernelSpec) -> SourceSymbols | None:
    """Only a CUDA section that declares its capabilities can select no SM of a cell and be
    left out; a kernel with none such is not read."""
    cuda = spec.kernels_for("cuda")
    if not any(section.cuda_capabilities is not None for section in cuda):
        return None
    torch = spec.torch
    return read_symbols(spec.root,
                        [*(torch.src if torch else ()), *(n for s in cuda for n in s.src)],
                        [*(torch.include if torch else ()), *(n for s in cuda for n in s.include)])


def _imports_triton(spec: KernelSpec) -> bool:
    for path in sorted(spec.package_dir.rglob("*.py")):
        try:
            if _IMPORTS_TRITON.search(path.read_text(encoding="utf-8", errors="replace")):
                return True
        except OSError:
            continue
    return False
