"""What GPU code a shared object carries: the SASS and PTX entries of its .nv_fatbin section.

Each object nvcc compiles contributes a fat binary container to the section: a 16-byte header
(magic 0xBA55ED50, version, header size, payload size) followed by entries, each with its own
header (kind 1 = PTX, 2 = SASS cubin; the SM number at offset 28; the arch-specific "a" and
family-specific "f" variants as flag bits at offset 40). Reading this needs no CUDA toolkit.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from elftools.elf.elffile import ELFFile

from ..errors import FatbinError

__all__ = ["FatbinEntry", "fatbin_entries", "parse_fatbin"]

FATBIN_MAGIC = 0xBA55ED50
_CONTAINER = struct.Struct("<IHHQ")  # magic, version, header size, size of the entries
_ENTRY = struct.Struct("<HHIQ")  # kind, unused, entry header size, payload size (aligned)
CodeKind = Literal["sass", "ptx"]
_KINDS: dict[int, CodeKind] = {1: "ptx", 2: "sass"}
_ARCH_SPECIFIC = 1 << 20
_FAMILY_SPECIFIC = 1 << 21


@dataclass(frozen=True, order=True)
class FatbinEntry:
    kind: CodeKind
    sm: int  # 90, 100, ...
    variant: str = ""  # "" | "a" | "f"

    @property
    def arch(self) -> str:
        return f"{self.sm}{self.variant}"

    def __str__(self) -> str:
        prefix = "sm" if self.kind == "sass" else "compute"
        return f"{prefix}_{self.arch}"


def fatbin_entries(shared_object: Path) -> list[FatbinEntry]:
    """The distinct GPU code entries of an ELF file, sorted; empty when it has no GPU code."""
    with open(shared_object, "rb") as handle:
        section = ELFFile(handle).get_section_by_name(".nv_fatbin")
        data = section.data() if section is not None else b""
    return sorted(set(parse_fatbin(data)))


def parse_fatbin(data: bytes) -> list[FatbinEntry]:
    entries = []
    pos = 0
    while pos + _CONTAINER.size <= len(data):
        magic, _version, header_size, size = _CONTAINER.unpack_from(data, pos)
        if magic != FATBIN_MAGIC:
            # Containers are 8-byte aligned within the section; skip padding between them.
            if data[pos:pos + 8].strip(b"\0") == b"":
                pos += 8
                continue
            raise FatbinError(f"no fat binary container at offset {pos:#x}")
        end = pos + header_size + size
        if end > len(data):
            raise FatbinError(f"fat binary container at {pos:#x} runs past the section")
        entry = pos + header_size
        while entry + 64 <= end:
            kind, _unused, entry_header, payload = _ENTRY.unpack_from(data, entry)
            if entry_header < 64:
                raise FatbinError(f"bad fat binary entry header at {entry:#x}")
            sm, = struct.unpack_from("<I", data, entry + 28)
            flags, = struct.unpack_from("<Q", data, entry + 40)
            variant = "a" if flags & _ARCH_SPECIFIC else "f" if flags & _FAMILY_SPECIFIC else ""
            if kind in _KINDS:
                entries.append(FatbinEntry(_KINDS[kind], sm, variant))
            entry += entry_header + payload
        pos = end
    return entries
