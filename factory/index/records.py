"""What the index knows of each published file, kept in <out>/.factory/manifest.json.

The manifest is the index's memory: a record per file in files/ (hashes, size, METADATA facts,
upload time, yank), and the outcome of each matrix cell (built, skipped with its reason, failed)
for the browse page. Pages are rendered from it alone, so regenerating an index of thousands of
wheels reads no wheel twice: a file is read again only when its size or mtime changed.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
import zipfile
from dataclasses import dataclass, field
from email.parser import BytesParser
from pathlib import Path
from typing import NamedTuple

from packaging.utils import canonicalize_name, parse_wheel_filename

from ..atomic import write_atomic
from ..errors import FactoryError
from ..wheel.inspect import torch_requirement

MANIFEST_SCHEMA = "kernel-wheel-factory/manifest/1"


class FileRecord(NamedTuple):
    """One published file. A named tuple: an index of ten thousand wheels loads, compares and
    saves these on every update, and tuples are the cheapest to make and compare."""

    filename: str
    project: str  # normalised: img2gray
    display_name: str  # as METADATA spells it
    version: str  # 1.0.0+cu130torch211
    label: str | None  # cu130torch211; None: in every cell's index
    sha256: str
    size: int
    mtime_ns: int
    metadata_sha256: str
    requires_python: str | None
    upload_time: str  # 2026-11-22T04:24:46.000000Z
    yanked: str | None = None  # the reason, when yanked
    torch: str | None = None  # the torch requirement's specifier
    summary: dict = {}  # from provenance: cell, gpu code, toolchain (never mutated)


@dataclass(frozen=True)
class CellOutcome:
    cell: str  # img2gray/cu130torch211/x86_64
    kernel: str
    version: str
    torch: str | None
    cuda: str | None
    label: str | None
    status: str  # built | unchanged | skipped | failed
    detail: str | None
    wheel: str | None


@dataclass
class Manifest:
    files: dict[str, FileRecord] = field(default_factory=dict)
    cells: dict[str, CellOutcome] = field(default_factory=dict)

    def to_json(self) -> dict:
        """Files as rows in FileRecord's field order (FILE_FIELDS names them)."""
        return {
            "schema": MANIFEST_SCHEMA, "file_fields": list(FileRecord._fields),
            "files": [list(record) for _, record in sorted(self.files.items())],
            "cells": {name: dict(vars(cell)) for name, cell in sorted(self.cells.items())},
        }


class IndexConflict(FactoryError):
    """The index cannot be updated without losing or changing something published."""


def load_manifest(path: Path) -> Manifest:
    if not path.is_file():
        return Manifest()
    data = json.loads(path.read_text())
    if data.get("schema") != MANIFEST_SCHEMA or data.get("file_fields") != list(FileRecord._fields):
        raise IndexConflict(f"{path} is not a manifest this factory reads (schema "
                            f"{data.get('schema')!r}): move it away and run 'factory index' to "
                            "make it again from files/ (the yanks it records are then lost)")
    return Manifest(
        {row[0]: FileRecord(*row) for row in data.get("files", [])},
        {name: CellOutcome(**cell) for name, cell in data.get("cells", {}).items()},
    )


def save_manifest(manifest: Manifest, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(manifest.to_json(), separators=(",", ":")))


def read_file_record(path: Path) -> FileRecord:
    """Everything the pages need from one wheel: hashes, METADATA facts and its provenance."""
    name, version, _build, _tags = parse_wheel_filename(path.name)
    data = path.read_bytes()
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        names = archive.namelist()
        dist_info = next(n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")
                         and n.endswith("/METADATA"))
        metadata = archive.read(f"{dist_info}/METADATA")
        provenance_name = f"{dist_info}/provenance.json"
        provenance = json.loads(archive.read(provenance_name)) if provenance_name in names else {}
    headers = BytesParser().parsebytes(metadata)
    info = path.stat()
    return FileRecord(
        filename=path.name, project=canonicalize_name(name),
        display_name=headers.get("Name") or str(name), version=str(version),
        label=version.local, sha256=hashlib.sha256(data).hexdigest(), size=len(data),
        mtime_ns=info.st_mtime_ns, metadata_sha256=hashlib.sha256(metadata).hexdigest(),
        requires_python=headers.get("Requires-Python"),
        upload_time=_upload_time(provenance, info.st_mtime),
        torch=torch_requirement(tuple(headers.get_all("Requires-Dist") or ())),
        summary=_summary(provenance),
    )


def metadata_bytes(path: Path) -> bytes:
    """The wheel's METADATA, byte for byte (served as <wheel>.metadata, PEP 658)."""
    with zipfile.ZipFile(path) as archive:
        (member,) = [n for n in archive.namelist()
                     if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
        return archive.read(member)


def _upload_time(provenance: dict, mtime: float) -> str:
    """The wheel's own time (its build record's source time), so that indexes made from the
    same wheels anywhere agree; the file's time for wheels without a record."""
    epoch = provenance.get("build", {}).get("source_date_epoch")
    seconds = int(epoch) if isinstance(epoch, int) else int(mtime)
    return time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime(seconds))


def _summary(provenance: dict) -> dict:
    cell = provenance.get("cell") or {}
    if not cell:
        return {}
    return {
        "cell": cell.get("id"), "torch": cell.get("torch"), "cuda": cell.get("cuda"),
        "sms": cell.get("sms", []), "gpu_code": cell.get("gpu_code", []),
        "platform": cell.get("platform"),
        "source": {k: v for k, v in (provenance.get("source") or {}).items()},
        "toolchain": provenance.get("toolchain", {}), "factory": provenance.get("factory"),
        "build_time": (provenance.get("build") or {}).get("time"),
    }
