"""What a shared object asks of the dynamic loader: the libraries it names (DT_NEEDED), the
symbol versions it needs from each (.gnu.version_r), its run paths, whether it carries a C++
runtime of its own (libstdc++ linked statically), and which of torch's C++ symbols outside the
stable ABI it calls."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection
from elftools.elf.sections import SymbolTableSection

from .. import defaults
from ..errors import NotAnElfFile, ProcessError
from ..system.process import bounded_run

__all__ = ["PERSONALITY", "Linkage", "demangle", "demangle_text", "is_elf", "read_linkage"]

PERSONALITY = "__gxx_personality_v0"  # libstdc++'s exception personality routine
# Itanium-mangled names (functions, vtables, typeinfo) in torch's C++ namespaces: c10::, at::,
# torch::, caffe2::. The stable ABI is the C shim (aoti_torch_*, torch_*: plain C names) and
# the C++ of torch::stable and torch::headeronly, which it promises to keep.
_TORCH_CXX = re.compile(r"_Z(?:T[VIS])?N[KVr]*(?:3c10|2at|5torch|6caffe2)")
_STABLE_CXX = re.compile(r"_Z(?:T[VIS])?N[KVr]*5torch(?:6stable|10headeronly)")
_MANGLED = re.compile(r"_Z[A-Za-z0-9_.$]+")


@dataclass(frozen=True)
class Linkage:
    needed: tuple[str, ...]
    version_needs: dict[str, tuple[str, ...]]  # library -> symbol versions, e.g. GLIBC_2.34
    runpaths: tuple[str, ...]
    machine: str  # EM_X86_64, EM_AARCH64
    own_cxx_runtime: bool = False  # defines libstdc++'s personality routine itself
    torch_cxx: tuple[str, ...] = ()  # undefined symbols of torch's C++ outside the stable ABI


def read_linkage(path: Path) -> Linkage:
    needed: list[str] = []
    runpaths: list[str] = []
    versions: dict[str, set[str]] = {}
    own_runtime = False
    torch_cxx: set[str] = set()
    with open(path, "rb") as handle:
        try:
            elf = ELFFile(handle)
        except ELFError as exc:
            raise NotAnElfFile(f"{path.name} is not an ELF file: {exc}") from None
        for section in elf.iter_sections():
            if isinstance(section, DynamicSection):
                for tag in section.iter_tags():
                    # pyelftools sets needed/runpath/rpath by tag kind; its stubs miss them.
                    kind = tag.entry.d_tag
                    if kind == "DT_NEEDED":
                        needed.append(tag.needed)  # type: ignore[attr-defined]
                    elif kind == "DT_RUNPATH":
                        runpaths.extend(tag.runpath.split(":"))  # type: ignore[attr-defined]
                    elif kind == "DT_RPATH":
                        runpaths.extend(tag.rpath.split(":"))  # type: ignore[attr-defined]
            elif isinstance(section, GNUVerNeedSection):
                for verneed, auxiliaries in section.iter_versions():
                    names = versions.setdefault(str(verneed.name), set())
                    names.update(str(aux.name) for aux in auxiliaries)
            if isinstance(section, SymbolTableSection) and not own_runtime:
                # With libstdc++ linked dynamically this routine is an undefined reference;
                # -static-libstdc++ puts a copy inside the object.
                own_runtime = any(symbol["st_shndx"] != "SHN_UNDEF" for symbol in
                                  section.get_symbol_by_name(PERSONALITY) or ())
            if isinstance(section, SymbolTableSection) and section.name == ".dynsym":
                torch_cxx.update(
                    symbol.name for symbol in section.iter_symbols()
                    if symbol["st_shndx"] == "SHN_UNDEF" and _TORCH_CXX.match(symbol.name)
                    and not _STABLE_CXX.match(symbol.name))
        machine = elf["e_machine"]
    return Linkage(tuple(needed), {lib: tuple(sorted(v)) for lib, v in sorted(versions.items())},
                   tuple(runpaths), machine, own_runtime, tuple(sorted(torch_cxx)))


def demangle(names: tuple[str, ...]) -> tuple[str, ...]:
    """C++ names as a person reads them, by binutils' c++filt (the names as they are where it
    is not installed)."""
    if not names:
        return names
    try:
        done = bounded_run(["c++filt"], defaults.TOOL_TIMEOUT, input="\n".join(names))
    except ProcessError:
        return names
    if done.returncode != 0:
        return names
    readable = tuple(done.stdout.splitlines())
    return readable if len(readable) == len(names) else names


def demangle_text(text: str) -> str:
    """`text` (a loader's message, say) with every mangled C++ name in it demangled."""
    names = tuple(dict.fromkeys(_MANGLED.findall(text)))
    readable = dict(zip(names, demangle(names), strict=True))
    return _MANGLED.sub(lambda found: readable[found[0]], text)


def is_elf(data: bytes) -> bool:
    return data[:4] == b"\x7fELF"
