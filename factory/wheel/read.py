"""A wheel read once: its bytes hashed, its name parsed, its METADATA and provenance unzipped.
This WheelFile is what the index and the publish step use of a wheel; a build hands on the one
its gates read (inspect.py builds its full report on the same read)."""

from __future__ import annotations

import hashlib
import io
import json
import re
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from email.message import Message
from email.parser import BytesParser
from functools import cached_property
from pathlib import Path, PurePosixPath
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.tags import Tag
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from ..errors import WheelReadError
from ..outputs.files import read_regular
from .provenance import Provenance
from .variant import VARIANT_FILE, Properties, check_variant_json, split_variant

__all__ = ["PROVENANCE_FILE", "WheelFile", "read_wheel", "torch_requirement"]

PROVENANCE_FILE = "provenance.json"


@dataclass(frozen=True)
class WheelFile:
    """What the index and the publish step need of a wheel."""

    filename: str
    name: str  # from the filename
    version: str  # from the filename, with its local label
    label: str | None  # the local version label: cu130torch211
    tags: frozenset[Tag]  # from the filename, expanded
    sha256: str
    size: int
    metadata: bytes | None  # .dist-info/METADATA, byte for byte (served as <wheel>.metadata)
    provenance: dict[str, Any] | None
    installed_size: int = 0  # the bytes of its files once installed (unzipped)
    # a variant wheel's (PEP 825) properties; its label is then the variant label, and its
    # version the public one
    variant: Properties | None = None

    @cached_property
    def headers(self) -> Message | None:
        return BytesParser().parsebytes(self.metadata) if self.metadata is not None else None

    @cached_property
    def record(self) -> Provenance | None:
        """The provenance record, read by its codec; None for a wheel without one, or with
        one not of the factory's schema."""
        return Provenance.read(self.provenance)

    @property
    def requires(self) -> tuple[str, ...]:
        return tuple(self.headers.get_all("Requires-Dist") or ()) if self.headers else ()


def read_wheel(path: Path) -> WheelFile:
    """A wheel's file facts: its bytes read and hashed once, METADATA and provenance unzipped."""
    data = read_bytes(path)
    with open_archive(path, data) as archive:
        damaged = archive.testzip()  # every member inflates and matches its CRC
        if damaged is not None:
            raise WheelReadError(f"cannot read the wheel ({damaged} fails its CRC check); it is "
                                 "damaged", file=path)
        return wheel_file(path, data, {name: _member(path, archive, name)
                                        for name in _records_of(path, archive.namelist())},
                          sum(info.file_size for info in archive.infolist()))


_MEMBER_LIMIT = 16 << 20  # bytes: METADATA, provenance.json or variant.json inflated
_WHEEL_LIMIT = 8 << 30  # bytes: the largest kernel wheels are a few hundred MB


def _member(path: Path, archive: zipfile.ZipFile, name: str) -> bytes:
    """A metadata member, read whole: refused when it inflates past what metadata can need
    (a small wheel may hold a member that inflates to gigabytes)."""
    size = archive.getinfo(name).file_size
    if size > _MEMBER_LIMIT:
        raise WheelReadError(f"its {name} inflates to {size} bytes; a wheel's metadata is never "
                             f"more than {_MEMBER_LIMIT >> 20} MiB", file=path)
    return archive.read(name)


def read_bytes(path: Path) -> bytes:
    """A wheel's bytes: a regular file (a link to one is followed) of at most _WHEEL_LIMIT
    bytes; a FIFO, a device or a larger file is refused before it is read."""
    try:
        data = read_regular(path, _WHEEL_LIMIT, follow=True)
    except OSError as exc:
        raise WheelReadError(f"cannot read the wheel ({exc.strerror})", file=path) from None
    if data is None:
        raise WheelReadError(f"not a regular file of at most {_WHEEL_LIMIT >> 30} GiB",
                             file=path)
    return data


@contextmanager
def open_archive(path: Path, data: bytes) -> Iterator[zipfile.ZipFile]:
    """The wheel as a zip archive; a damaged one (truncated, a member that does not inflate or
    fails its CRC) is a WheelReadError, whether found on opening or while reading members."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            yield archive
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, ValueError) as exc:
        what = "not a zip file" if not data else str(exc) or type(exc).__name__
        raise WheelReadError(f"cannot read the wheel ({what}); it is damaged or not a wheel",
                             file=path) from None


def _records_of(path: Path, names: list[str]) -> list[str]:
    """The members read_wheel needs: METADATA, the provenance and the variant metadata of the
    one .dist-info."""
    folder = dist_info_folder(path, names)
    return [name for name in (f"{folder}/METADATA", f"{folder}/{PROVENANCE_FILE}",
                              f"{folder}/{VARIANT_FILE}")
            if name in names]


def wheel_file(path: Path, data: bytes, members: dict[str, bytes],
               installed_size: int = 0) -> WheelFile:
    base, variant_label = split_variant(path.name)
    try:
        name, version, _build, tags = parse_wheel_filename(base)
    except InvalidWheelFilename as exc:
        raise WheelReadError(f"not a wheel file name ({exc})", file=path) from None
    folder = dist_info_folder(path, members)
    variant = None
    if variant_label is not None:
        if not re.fullmatch(r"[a-z0-9_]+(?:\.[a-z0-9_]+)*", variant_label):
            raise WheelReadError(f"its variant label '{variant_label}' starts, ends or has "
                                 "empty parts between dots; this factory indexes none such",
                                 file=path)
        if version.local is not None:
            raise WheelReadError("a variant wheel's version has no local label", file=path)
        if f"{folder}/{VARIANT_FILE}" not in members:
            raise WheelReadError(f"is named as a variant wheel, but has no {VARIANT_FILE}",
                                 file=path)
        variant = check_variant_json(members[f"{folder}/{VARIANT_FILE}"], variant_label, path)
    return WheelFile(
        filename=path.name, name=str(name), version=str(version),
        label=variant_label or version.local,
        tags=tags, sha256=hashlib.sha256(data).hexdigest(), size=len(data),
        metadata=members.get(f"{folder}/METADATA"),
        provenance=read_json(members, f"{folder}/{PROVENANCE_FILE}"),
        installed_size=installed_size, variant=variant,
    )


def dist_info_folder(path: Path, members: dict[str, bytes] | list[str]) -> str:
    folders = {PurePosixPath(name).parts[0] for name in members
               if PurePosixPath(name).parts[0].endswith(".dist-info")}
    if len(folders) != 1:
        raise WheelReadError(f"expected one .dist-info folder, found {len(folders)}: "
                             f"{', '.join(sorted(folders)) or 'none'}", file=path)
    return folders.pop()


def read_json(contents: dict[str, bytes], name: str) -> dict[str, Any] | None:
    if name not in contents:
        return None
    try:
        found = json.loads(contents[name])
    except ValueError as exc:
        return {"error": f"{name} is not JSON: {exc}"}
    except RecursionError:
        return {"error": f"{name} nests deeper than JSON metadata does"}
    return found if isinstance(found, dict) else {"error": f"{name} is not a JSON object"}


def torch_requirement(requires: tuple[str, ...]) -> str | None:
    for text in requires:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        if canonicalize_name(requirement.name) == "torch" and requirement.marker is None:
            return str(requirement.specifier) or "any"
    return None
