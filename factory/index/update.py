"""Bring an output folder's index up to date with the wheels in its files/ folder.

    <out>/files/<wheel> and <wheel>.metadata    immutable, written first
    <out>/<label>/simple/[<project>/]            one PEP 503/691 index per cell (e.g. cu130torch211)
    <out>/simple/[<project>/]                    every wheel
    <out>/index.html, browse.json                the browse page

Readers never see a half-written page or a link to a missing file, even if the process is
killed: every file is written under a temporary name and renamed into place, the files a page
links to exist before the page does, project pages are written before the root pages that
link to them, and a project folder is removed only after no root page links to it. Only pages
whose bytes change are written, so adding a wheel rewrites just the pages it appears on.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from packaging.utils import canonicalize_name

from ..cache import exclusive
from ..errors import ConfigError
from .pages import project_html, project_json, root_html, root_json
from .records import (
    CellOutcome,
    FileRecord,
    IndexConflict,
    Manifest,
    load_manifest,
    metadata_bytes,
    read_file_record,
    save_manifest,
)

COMBINED = "simple"
PAGE_NAMES = ("index.html", "index.json")


@dataclass(frozen=True)
class IndexLayout:
    out: Path

    @property
    def files(self) -> Path:
        return self.out / "files"

    @property
    def manifest(self) -> Path:
        return self.out / ".factory" / "manifest.json"

    @property
    def lock(self) -> Path:
        return self.out / ".factory" / "index"


@dataclass(frozen=True)
class IndexSummary:
    wheels: int
    labels: tuple[str, ...]
    projects: int
    pages_written: int
    pages_removed: int


def update_index(out: Path, *, force: bool = False, outcomes: Iterable[CellOutcome] = (),
                 change: Callable[[Manifest], None] | None = None) -> IndexSummary:
    """Index what files/ holds; `change` may edit the manifest (a yank) before pages are made."""
    layout = IndexLayout(out)
    layout.files.mkdir(parents=True, exist_ok=True)
    with exclusive(layout.lock):
        for leftover in out.rglob(".*.tmp"):  # from a process that was killed mid-write
            leftover.unlink(missing_ok=True)
        manifest = load_manifest(layout.manifest)
        manifest.files = _scan_files(layout, manifest, force)
        for outcome in outcomes:
            manifest.cells[outcome.cell] = outcome
        if change is not None:
            change(manifest)
        written, removed, labels, projects = _write_pages(layout, manifest)
        save_manifest(manifest, layout.manifest)
    return IndexSummary(len(manifest.files), labels, projects, written, removed)


def yank(out: Path, name: str, version: str, label: str | None, reason: str) -> list[str]:
    """Mark the files of one release yanked (PEP 592): every label, or only `label`'s.
    `version` is the public version (1.0.0) or a labelled one (1.0.0+cu130torch211)."""
    project = canonicalize_name(name)
    marked: list[str] = []

    def mark(manifest: Manifest) -> None:
        for filename, record in sorted(manifest.files.items()):
            if record.project != project or label not in (None, record.label):
                continue
            if version not in (record.version, record.version.split("+")[0]):
                continue
            manifest.files[filename] = replace(record, yanked=reason)
            marked.append(filename)
        if not marked:
            where = f" with label {label}" if label else ""
            raise ConfigError(f"no published file of {name} {version}{where} in {out}",
                              key="yank")

    update_index(out, change=mark)
    return marked


def _scan_files(layout: IndexLayout, manifest: Manifest, force: bool) -> dict[str, FileRecord]:
    """A record for every wheel in files/: from the manifest while the file's size and mtime
    are unchanged, read again otherwise. A file whose bytes changed under a published name is
    refused unless `force`."""
    records: dict[str, FileRecord] = {}
    for path in sorted(layout.files.glob("*.whl")):
        known = manifest.files.get(path.name)
        info = path.stat()
        if known is not None and known.size == info.st_size and known.mtime_ns == info.st_mtime_ns:
            record = known
            if not path.with_name(path.name + ".metadata").is_file():
                _ensure_metadata(path, record)
        else:
            record = read_file_record(path)
            if known is not None:
                if known.sha256 != record.sha256 and not force:
                    raise IndexConflict(
                        f"{path} changed after it was published (sha256 {known.sha256[:12]}, now "
                        f"{record.sha256[:12]}); published files are immutable: restore it, or "
                        "pass --force to publish the new bytes under the same name")
                record = replace(record, yanked=known.yanked)
            _ensure_metadata(path, record)
        records[path.name] = record
    return records


def _ensure_metadata(wheel: Path, record: FileRecord) -> None:
    target = wheel.with_name(wheel.name + ".metadata")
    if target.is_file() and hashlib.sha256(target.read_bytes()).hexdigest() == \
            record.metadata_sha256:
        return
    _write_atomic(target, metadata_bytes(wheel))


def _write_pages(layout: IndexLayout, manifest: Manifest) -> tuple[int, int, tuple[str, ...], int]:
    by_label: dict[str, list[FileRecord]] = defaultdict(list)
    anywhere = [r for r in manifest.files.values() if r.label is None]
    labels = sorted({r.label for r in manifest.files.values() if r.label is not None})
    for record in manifest.files.values():
        if record.label is not None:
            by_label[record.label].append(record)
    indexes = {f"{label}/{COMBINED}": by_label[label] + anywhere for label in labels}
    indexes[COMBINED] = list(manifest.files.values())

    written = removed = 0
    roots: list[tuple[Path, bytes]] = []
    keep: dict[Path, set[str]] = {}
    for index, records in sorted(indexes.items()):
        base = layout.out / index
        files_url = "../" * (index.count("/") + 2) + "files/"
        projects: dict[str, list[FileRecord]] = defaultdict(list)
        for record in records:
            projects[record.project].append(record)
        names = {project: sorted(rs, key=lambda r: r.filename)[0].display_name
                 for project, rs in projects.items()}
        for project, project_records in projects.items():
            folder = base / project
            written += _write_if_changed(folder / "index.html",
                                         project_html(project, project_records, files_url))
            written += _write_if_changed(folder / "index.json",
                                         project_json(project, project_records, files_url))
        roots.append((base / "index.html", root_html(names)))
        roots.append((base / "index.json", root_json(names)))
        keep[base] = set(projects)
    for path, data in roots:
        written += _write_if_changed(path, data)
    for base, projects in keep.items():
        removed += _remove_stale_projects(base, projects)
    removed += _remove_stale_indexes(layout.out, {f"{label}/{COMBINED}" for label in labels})
    projects_total = len({r.project for r in manifest.files.values()})
    return written, removed, tuple(labels), projects_total


def _write_if_changed(path: Path, data: bytes) -> int:
    try:
        if path.read_bytes() == data:
            return 0
    except OSError:
        pass
    _write_atomic(path, data)
    return 1


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_bytes(data)
    os.replace(temporary, path)


def _remove_stale_projects(base: Path, projects: set[str]) -> int:
    removed = 0
    for folder in base.iterdir():
        if folder.is_dir() and folder.name not in projects and _is_page_folder(folder):
            shutil.rmtree(folder)
            removed += 1
    return removed


def _remove_stale_indexes(out: Path, wanted: set[str]) -> int:
    """Per-cell indexes whose label no longer has a wheel (all its wheels were removed)."""
    removed = 0
    for simple in out.glob(f"*/{COMBINED}"):
        index = f"{simple.parent.name}/{COMBINED}"
        if index not in wanted and simple.is_dir() and _is_page_folder(simple):
            shutil.rmtree(simple.parent if len(list(simple.parent.iterdir())) == 1 else simple)
            removed += 1
    return removed


def _is_page_folder(folder: Path) -> bool:
    """Only folders the index itself wrote are ever removed."""
    return (folder / "index.html").is_file() and (folder / "index.json").is_file()
