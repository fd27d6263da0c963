"""What GPU code a shared object carries: the SASS and PTX entries of its .nv_fatbin section,
and how many bytes each takes.

Each object nvcc compiles contributes a fat binary container to the section: a 16-byte header
(magic 0xBA55ED50, version, header size, payload size) followed by entries, each with its own
header (kind 1 = PTX, 2 = SASS cubin; the payload's size at offset 8; the SM number at offset
28; flag bits at offset 40: the arch-specific "a" and family-specific "f" variants, and
whether the payload is compressed; a compressed payload's inflated size at offset 56). A
compressed entry keeps its header as it is, so its kind and SM read the same. Reading this
needs no CUDA toolkit.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar

from elftools.elf.elffile import ELFFile

from ..errors import FatbinError
from ..values.units import human_size

__all__ = ["CodeSize", "FatbinEntry", "describe_code_size", "fatbin_entries", "fatbin_sizes",
           "parse_fatbin", "summed"]

FATBIN_MAGIC = 0xBA55ED50
_CONTAINER = struct.Struct("<IHHQ")  # magic, version, header size, size of the entries
_ENTRY = struct.Struct("<HHIQ")  # kind, unused, entry header size, payload size (aligned)
CodeKind = Literal["sass", "ptx"]
Code = TypeVar("Code", "FatbinEntry", str)
_KINDS: dict[int, CodeKind] = {1: "ptx", 2: "sass"}
_ARCH_SPECIFIC = 1 << 20
_FAMILY_SPECIFIC = 1 << 21
# fatbinary's compressed payloads: LZ4 (-compress-all before CUDA 13) and CUDA 13's modes
_COMPRESSED = (1 << 13) | (1 << 15)


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


@dataclass(frozen=True)
class CodeSize:
    """The bytes of one kind of GPU code (sm_90, compute_90) in a shared object: as stored,
    and once the driver has inflated what is compressed."""

    stored: int
    inflated: int
    compressed: bool  # every entry of it is

    def __add__(self, other: CodeSize) -> CodeSize:
        return CodeSize(self.stored + other.stored, self.inflated + other.inflated,
                        self.compressed and other.compressed)


def describe_code_size(code: str, size: CodeSize) -> str:
    """sm_90 1.2 MiB (8.4 MiB inflated), or sm_90 8.4 MiB when stored as it is."""
    if size.compressed:
        return f"{code} {human_size(size.stored)} ({human_size(size.inflated)} inflated)"
    return f"{code} {human_size(size.stored)}"


def fatbin_entries(shared_object: Path) -> list[FatbinEntry]:
    """The distinct GPU code entries of an ELF file, sorted; empty when it has no GPU code."""
    return sorted(set(parse_fatbin(_fatbin_section(shared_object))))


def fatbin_sizes(shared_object: Path) -> dict[FatbinEntry, CodeSize]:
    """The bytes each kind of GPU code of an ELF file takes, summed over its entries."""
    return summed(_scan(_fatbin_section(shared_object)))


def summed(sizes: Iterable[tuple[Code, CodeSize]]) -> dict[Code, CodeSize]:
    """The sizes of each kind of GPU code (an entry, or its name: sm_90), added up, sorted."""
    total: dict[Code, CodeSize] = {}
    for code, size in sizes:
        total[code] = total[code] + size if code in total else size
    return dict(sorted(total.items()))


def _fatbin_section(shared_object: Path) -> bytes:
    with open(shared_object, "rb") as handle:
        section = ELFFile(handle).get_section_by_name(".nv_fatbin")
        return section.data() if section is not None else b""


def parse_fatbin(data: bytes) -> list[FatbinEntry]:
    return [entry for entry, _ in _scan(data)]


def _scan(data: bytes) -> list[tuple[FatbinEntry, CodeSize]]:
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
            compressed = bool(flags & _COMPRESSED)
            inflated, = struct.unpack_from("<Q", data, entry + 56) if compressed else (payload,)
            if kind in _KINDS:
                entries.append((FatbinEntry(_KINDS[kind], sm, variant),
                                CodeSize(payload, inflated, compressed)))
            entry += entry_header + payload
        pos = end
    return entries
