"""What the index knows of each published file, kept in <out>/.factory/manifest.json.

The manifest is the index's memory: a record per file in files/ (hashes, size, METADATA facts,
the time it entered the index, yank), and the outcome of each matrix cell (built, skipped with
its reason, failed) for the browse page. Pages are rendered from it alone, so regenerating an
index of thousands of wheels reads no wheel twice: a file is read again only when its size or
mtime changed.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion

from ..config.torches import is_release_build
from ..errors import IndexConflict, WheelReadError
from ..outputs.files import read_regular, write_atomic
from ..outputs.layout import Layout
from ..trust.credentials import redact
from ..wheel.provenance import Provenance
from ..wheel.read import WheelFile, read_wheel, torch_requirement

OutcomeStatus = Literal["built", "unchanged", "compiled", "failed", "skipped", "untested"]
"""What became of a cell, as the index records it (the builder's statuses)."""

__all__ = ["CPU", "MANIFEST_SCHEMA", "Catalogue", "CellOutcome", "FileRecord", "Manifest",
           "OutcomeStatus", "cell_catalogue", "file_record", "index_time", "load_manifest",
           "metadata_bytes", "public", "published_names", "read_file_record", "save_manifest",
           "served_cells"]

MANIFEST_SCHEMA = "kernel-wheel-factory/manifest/1"
_MANIFEST_LIMIT = 1 << 30  # bytes: a row of a few hundred bytes per wheel


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
    upload_time: str  # when it entered the index (PEP 700): 2026-11-22T04:24:46.000000Z
    yanked: str | None = None  # the reason, when yanked
    torch: str | None = None  # the torch requirement's specifier
    # from provenance: cell, GPU code, toolchain; a variant wheel's properties under "variant"
    # (a named tuple's default, never mutated)
    summary: dict[str, Any] = {}  # noqa: RUF012


@dataclass(frozen=True)
class CellOutcome:
    cell: str  # img2gray/cu130torch211/x86_64
    kernel: str
    version: str
    torch: str | None
    cuda: str | None
    label: str | None
    status: OutcomeStatus
    detail: str | None
    wheel: str | None
    ops: list[dict[str, Any]] | None = None  # the ops its wheel registers (the import gate's)
    tests: dict[str, Any] | None = None  # the kernel's own tests run against its wheel
    stable_abi: str | None = None  # a stable-ABI cell's: the stable ABI version it targets
    served_by: str | None = None  # a cell whose index lists that cell's stable-ABI wheel


@dataclass
class Manifest:
    files: dict[str, FileRecord] = field(default_factory=dict)
    cells: dict[str, CellOutcome] = field(default_factory=dict)
    # Published files no longer in files/, by name, with the sha256 they were published with:
    # a published name keeps its bytes even after its file is gone.
    withdrawn: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Files as rows in FileRecord's field order (FILE_FIELDS names them)."""
        return {
            "schema": MANIFEST_SCHEMA, "file_fields": list(FileRecord._fields),
            "files": [list(record) for _, record in sorted(self.files.items())],
            "cells": {name: dict(vars(cell)) for name, cell in sorted(self.cells.items())},
            **({"withdrawn": dict(sorted(self.withdrawn.items()))} if self.withdrawn else {}),
        }



def load_manifest(path: Path) -> Manifest:
    """The manifest, or an empty one when there is none yet. One that cannot be read (cut
    short, not JSON, another shape, a folder in its place) is an IndexConflict naming the
    remedy: it is never overwritten silently, since it holds the yanks."""
    if not path.exists() and not path.is_symlink():
        return Manifest()
    remedy = ("move it away and run 'factory index' to make it again from files/ (the yanks "
              "and cell outcomes it records are then lost)")
    try:
        raw = read_regular(path, _MANIFEST_LIMIT)
        if raw is None:
            raise ValueError(f"not a regular file of at most {_MANIFEST_LIMIT >> 20} MiB")
        data = json.loads(raw)
    except (OSError, ValueError, RecursionError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else \
            str(exc) if str(exc).startswith("not a regular") else "not valid JSON"
        raise IndexConflict(f"{path} cannot be read ({reason}): {remedy}") from None
    if not isinstance(data, dict) or data.get("schema") != MANIFEST_SCHEMA or \
            data.get("file_fields") != list(FileRecord._fields):
        schema = data.get("schema") if isinstance(data, dict) else None
        raise IndexConflict(f"{path} is not a manifest this factory reads (schema "
                            f"{schema!r}): {remedy}")
    try:
        files = {row[0]: _file_record(row) for row in data.get("files", [])}
        cells = {name: _cell_outcome(cell) for name, cell in data.get("cells", {}).items()}
        withdrawn = {name: _withdrawn(name, sha256)
                     for name, sha256 in data.get("withdrawn", {}).items()}
    except (TypeError, ValueError, KeyError, IndexError, AttributeError):
        raise IndexConflict(f"{path} is damaged (a record of the wrong shape): "
                            f"{remedy}") from None
    return Manifest(files, cells, withdrawn)


def published_names(out: Path) -> dict[str, str]:
    """What the index in `out` published under each name, its file still there or not."""
    manifest = load_manifest(Layout(out).manifest)
    return {**manifest.withdrawn,
            **{name: record.sha256 for name, record in manifest.files.items()}}


def _withdrawn(name: Any, sha256: Any) -> str:
    if not isinstance(name, str) or "/" in name or name.startswith(".") or \
            not isinstance(sha256, str) or not re.fullmatch(r"[0-9a-f]{64}", sha256):
        raise ValueError(name)
    return sha256


def _file_record(row: list[Any]) -> FileRecord:
    record = FileRecord(*row)
    if not all(isinstance(value, str) for value in (record.filename, record.sha256,
                                                      record.metadata_sha256, record.project)) \
            or not isinstance(record.size, int) or not isinstance(record.mtime_ns, int):
        raise ValueError(row)
    # names that become folders and links must be plain: a damaged (or edited) manifest
    # must not lead a page outside the output folder
    if not _PROJECT.fullmatch(record.project) or "/" in record.filename or \
            record.filename.startswith(".") or not (
                record.label is None or _LABEL.fullmatch(record.label)):
        raise ValueError(row)
    # a time is published as it is (and merged by comparing the text): only the one form
    if not isinstance(record.upload_time, str) or not _TIME.fullmatch(record.upload_time):
        raise ValueError(row)
    return record


def _cell_outcome(fields: dict[str, Any]) -> CellOutcome:
    outcome = CellOutcome(**fields)
    if not isinstance(outcome.kernel, str) or \
            not _PROJECT.fullmatch(canonicalize_name(outcome.kernel)):
        raise ValueError(fields)
    return outcome


_PROJECT = re.compile(r"[a-z0-9]+(?:[-_.][a-z0-9]+)*")
# a local version label (cu130torch211), or a variant label (PEP 825 allows "_" too)
_LABEL = re.compile(r"[a-z0-9_]+(?:\.[a-z0-9_]+)*")
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


def public(text: str | None) -> str | None:
    """A text the index publishes: masked as a log line is."""
    return None if text is None else redact(text)


def save_manifest(manifest: Manifest, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(manifest.to_json(), separators=(",", ":")))


def file_record(wheel: WheelFile, mtime_ns: int) -> FileRecord:
    """Everything the pages need from one wheel, from what was read of it once (by the build's
    gates, or by read_wheel)."""
    if wheel.metadata is None or wheel.headers is None:
        raise WheelReadError("has no .dist-info/METADATA", file=wheel.filename)
    headers = wheel.headers
    return FileRecord(
        filename=wheel.filename, project=canonicalize_name(wheel.name),
        display_name=headers.get("Name") or wheel.name, version=wheel.version,
        label=wheel.label, sha256=wheel.sha256, size=wheel.size, mtime_ns=mtime_ns,
        metadata_sha256=hashlib.sha256(wheel.metadata).hexdigest(),
        requires_python=headers.get("Requires-Python"),
        upload_time=index_time(mtime_ns / 1e9),
        torch=torch_requirement(wheel.requires),
        summary={**_summary(wheel.record), "installed_size": wheel.installed_size,
                 **({"variant": wheel.variant} if wheel.variant is not None else {})},
    )


def read_file_record(path: Path) -> FileRecord:
    return file_record(read_wheel(path), path.stat().st_mtime_ns)


def metadata_bytes(path: Path) -> bytes:
    """The wheel's METADATA, byte for byte (served as <wheel>.metadata, PEP 658)."""
    metadata = read_wheel(path).metadata
    if metadata is None:
        raise WheelReadError("has no .dist-info/METADATA", file=path)
    return metadata


def index_time(seconds: float) -> str:
    """A time as the pages write it (PEP 700's upload-time, UTC). A wheel's is the time its
    file was put in files/, when the index first saw it; the index keeps it from then on, and
    a merge carries it over from where the wheel was first indexed."""
    return time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime(int(seconds)))


def _torch_shown(cell: Mapping[str, Any]) -> Any:
    """The torch a cell record names: major.minor, or the whole version of a build that no
    index publishes (its wheels fit that build only)."""
    installed = cell.get("installed_torch")
    version = installed.get("version") if isinstance(installed, dict) else None
    if isinstance(version, str):
        try:
            if not is_release_build(version):
                return version
        except InvalidVersion:
            pass
    return cell.get("torch")


def _gpu_code(record: Provenance) -> Any:
    """The GPU code a wheel holds: what the cell planned, or, for a project that compiles with
    its own arch list, what its shared objects were found to carry."""
    if record.gpu_code_found is not None:
        return sorted({code for codes in record.gpu_code_found.values() for code in codes})
    return record.cell.get("gpu_code", [])


def _summary(record: Provenance | None) -> dict[str, Any]:
    if record is None or not record.cell:
        return {}
    cell = record.cell
    return {
        "cell": cell.get("id"), "torch": _torch_shown(cell),
        # a CPU cell's wheel stands in the CUDA column "cpu" of pages and doctor
        "cuda": cell.get("cuda") or (CPU if cell.get("backend") == CPU else None),
        "sms": cell.get("sms", []), "gpu_code": _gpu_code(record),
        "platform": cell.get("platform"),
        **({"cross": True} if cell.get("cross") is True else {}),
        "source": record.source.to_json(),
        "toolchain": dict(record.toolchain), "factory": record.factory,
        "build_time": record.build.time,
        **({"stable_abi": cell["stable_abi"]} if cell.get("stable_abi") else {}),
        **({"gpu_code_sizes": dict(record.gpu_code_sizes)}
           if record.gpu_code_sizes is not None else {}),
        **({"gpu_code_beyond": beyond} if (beyond := _beyond_cell(record)) else {}),
    }


def _beyond_cell(record: Provenance) -> list[str]:
    """The GPU code a project compiled that its cell did not ask for (its own arch list)."""
    if record.gpu_code_found is None:
        return []
    archs = {str(sm).replace(".", "") for sm in record.cell.get("sms", [])}
    return [code for code in _gpu_code(record) if code.partition("_")[2] not in archs]


Catalogue = dict[str, list[tuple[str, str, str]]]


CPU = "cpu"  # the CUDA column of CPU cells in outcomes, summaries and pages


def cell_catalogue(cells: Iterable[CellOutcome]) -> Catalogue:
    """project -> (label, torch, CUDA) of each per-torch cell the index knows of it: built,
    served, skipped or failed, of any release. A stable-ABI wheel is listed in those of its
    project's cells that it serves."""
    found: dict[str, set[tuple[str, str, str]]] = {}
    for outcome in cells:
        if outcome.label and outcome.torch and outcome.cuda and outcome.stable_abi is None:
            found.setdefault(canonicalize_name(outcome.kernel), set()).add(
                (outcome.label, outcome.torch, outcome.cuda))
    return {project: sorted(cells) for project, cells in found.items()}


def served_cells(record: FileRecord, catalogue: Catalogue) -> list[tuple[str, str, str]]:
    """The cells (label, torch, CUDA) of its project a stable-ABI wheel serves: its CUDA
    major, a torch its requirement allows. Empty for any other wheel."""
    if not record.summary.get("stable_abi") or not record.torch:
        return []
    try:
        allowed = SpecifierSet(record.torch)
    except InvalidSpecifier:
        return []
    major = str(record.summary.get("cuda") or "").split(".")[0]
    return [(label, torch, cuda) for label, torch, cuda in catalogue.get(record.project, ())
            if cuda.split(".")[0] == major and _allows(allowed, torch)]


def _allows(allowed: SpecifierSet, torch: str) -> bool:
    try:
        return allowed.contains(torch, prereleases=True)
    except InvalidVersion:
        return False
