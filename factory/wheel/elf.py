"""What a shared object asks of the dynamic loader: the libraries it names (DT_NEEDED), the
symbol versions it needs from each (.gnu.version_r), its run paths, and whether it carries
a C++ runtime of its own (libstdc++ linked statically)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection
from elftools.elf.sections import SymbolTableSection

from ..errors import NotAnElfFile

__all__ = ["PERSONALITY", "Linkage", "is_elf", "read_linkage"]

PERSONALITY = "__gxx_personality_v0"  # libstdc++'s exception personality routine


@dataclass(frozen=True)
class Linkage:
    needed: tuple[str, ...]
    version_needs: dict[str, tuple[str, ...]]  # library -> symbol versions, e.g. GLIBC_2.34
    runpaths: tuple[str, ...]
    machine: str  # EM_X86_64, EM_AARCH64
    own_cxx_runtime: bool = False  # defines libstdc++'s personality routine itself


def read_linkage(path: Path) -> Linkage:
    needed: list[str] = []
    runpaths: list[str] = []
    versions: dict[str, set[str]] = {}
    own_runtime = False
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
        machine = elf["e_machine"]
    return Linkage(tuple(needed), {lib: tuple(sorted(v)) for lib, v in sorted(versions.items())},
                   tuple(runpaths), machine, own_runtime)


def is_elf(data: bytes) -> bool:
    return data[:4] == b"\x7fELF"
