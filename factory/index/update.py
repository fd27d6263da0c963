"""Bring an output folder's index up to date with the wheels in its files/ folder.

    <out>/files/<wheel> and <wheel>.metadata    immutable, written first
    <out>/<label>/simple/[<project>/]            one PEP 503/691 index per cell (e.g. cu130torch211)
    <out>/simple/[<project>/]                    every wheel
    <out>/variants/<torch>/simple/[<project>/]   variant wheels (variants.py), with each
                                                 release's {name}-{version}-variants.json
    <out>/index.html, browse.css, browse.js      the browse page (and its favicon.svg), which reads
    <out>/browse.json, browse/<project>.json     packages, coverage and wheel facts

Readers never see a half-written page or a link to a missing file, even if the process is
killed: every file is written under a temporary name and renamed into place, the files a page
links to exist before the page does, project pages are written before the root pages that
link to them, and a project folder is removed only after no root page links to it.

An update renders only the pages of projects whose files changed (and the root pages of
indexes whose list of projects changed); `full` renders every page, and so does the first
update after a process was killed mid-update. Either way only pages whose bytes change are
written.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from packaging.utils import canonicalize_name

from ..errors import ConfigError, WheelReadError
from ..outputs.files import file_sha256, remove_abandoned_temporaries, write_atomic
from ..outputs.journal import Pending, pending, prune
from ..outputs.layout import Layout, refuse_links
from ..system.cache import exclusive
from ..wheel.read import WheelFile
from .browse import ASSETS, asset, browse_index, browse_project
from .pages import project_html, project_json, root_html, root_json
from .records import (
    CellOutcome,
    FileRecord,
    Manifest,
    cell_catalogue,
    file_record,
    load_manifest,
    metadata_bytes,
    read_file_record,
    save_manifest,
    served_cells,
)
from .variants import VARIANTS, consistent_variants, variant_indexes, variants_files

__all__ = ["COMBINED", "IndexSummary", "update_index", "verify_index", "yank"]

COMBINED = "simple"


@dataclass(frozen=True)
class IndexSummary:
    wheels: int
    labels: tuple[str, ...]
    projects: int
    pages_written: int
    pages_removed: int
    wheel_bytes: int = 0  # the bytes of every wheel in files/
    # files/ entries left out of the pages or put right, one line each, naming the file and
    # what to do; the pages of every other file were still written
    problems: tuple[str, ...] = ()
    variants: tuple[str, ...] = ()  # the variants indexes: variants/torch211/simple


def update_index(out: Path, *, force: bool = False, outcomes: Iterable[CellOutcome] = (),
                 change: Callable[[Manifest], None] | None = None, full: bool = False,
                 published: Mapping[str, WheelFile] | None = None,
                 journal_key: bytes | None = None) -> IndexSummary:
    """Index what files/ holds; `change` may edit the manifest (a yank) before pages are made.

    `published` holds the files a build just put in files/, as the build read them: their
    records are made from that, and the other files the manifest knows are taken as they were,
    unread, which keeps a build's update of a big index quick. A wheel that neither the build
    published nor the manifest knows (one a project's build, or anything else, dropped into
    files/) is then left out and reported: only `factory index` (no `published`) indexes files
    put there by hand. Without it every file is checked against its record (size and mtime,
    then its bytes), and every .metadata file against the wheel's.

    A file that cannot be indexed (not a wheel, damaged, changed after it was published) is
    reported in the summary's `problems` and left out; it never stops the other files' pages.

    `journal_key` is the object cache's key, which a build signs its publish-journal notes
    under: the wheels a killed build noted are then taken as its own; without it no note is
    read.
    """
    layout = Layout(out)
    refuse_links(out)
    layout.files.mkdir(parents=True, exist_ok=True)
    with exclusive(layout.index_lock):
        interrupted = layout.index_in_progress.exists()
        if interrupted:
            remove_abandoned_temporaries(out)
        previous = load_manifest(layout.manifest)
        full = full or interrupted or not layout.manifest.exists()
        trusted = None if published is None or full else set(previous.files) - set(published)
        notes = pending(layout.publishing, journal_key)
        scan = _Scan(layout, previous, force, trusted, published or {}, published is not None,
                     notes)
        records = scan.records()
        scan.problems += consistent_variants(records, previous.files)
        manifest = Manifest(records, dict(previous.cells), _withdrawn(previous, records))
        for outcome in outcomes:
            manifest.cells[outcome.cell] = outcome
        if change is not None:
            change(manifest)
        layout.index_in_progress.write_text("")
        pages = _Pages(layout, manifest, None if full else previous)
        pages.write()
        if full or manifest.files != previous.files or manifest.cells != previous.cells:
            save_manifest(manifest, layout.manifest)
        prune(notes.values(), {name: record.sha256 for name, record in manifest.files.items()},
              layout.files)
        layout.index_in_progress.unlink()
    projects = len({record.project for record in manifest.files.values()})
    return IndexSummary(len(manifest.files), tuple(sorted(pages.labels)), projects,
                        pages.written, pages.removed,
                        sum(record.size for record in manifest.files.values()),
                        tuple(scan.problems),
                        tuple(sorted(name for name in pages.indexes
                                     if name.startswith(VARIANTS + "/"))))


def _withdrawn(previous: Manifest, records: Mapping[str, FileRecord]) -> dict[str, str]:
    """The published names whose files are gone, with the bytes they were published with: the
    earlier ones and those gone since; a name whose file is back is indexed again."""
    published = {**previous.withdrawn,
                 **{name: record.sha256 for name, record in previous.files.items()}}
    return {name: sha256 for name, sha256 in published.items() if name not in records}


def verify_index(out: Path) -> tuple[int, list[str]]:
    """Hash every file in files/ against the manifest, writing nothing: how many files were
    checked, and one line per mismatch (changed bytes, an edited .metadata, a published file
    missing, a file the manifest does not know)."""
    layout = Layout(out)
    manifest = load_manifest(layout.manifest)
    if not layout.manifest.is_file():
        raise ConfigError("has no .factory/manifest.json to verify against: run 'factory "
                          "index' first", file=out, key="--verify")
    problems = []
    present = {path.name: path for path in layout.files.iterdir()} if layout.files.is_dir() \
        else {}
    for name, record in sorted(manifest.files.items()):
        wheel = present.get(name)
        if wheel is None or not wheel.is_file():
            problems.append(f"{layout.files / name}: published, but missing from files/")
            continue
        digest = file_sha256(wheel)
        if digest != record.sha256:
            problems.append(f"{wheel}: bytes changed after it was published (sha256 "
                            f"{record.sha256[:12]}, now {digest[:12]})")
        metadata = present.get(name + ".metadata")
        if metadata is None or not metadata.is_file():
            problems.append(f"{wheel}.metadata: missing ('factory index' writes it again)")
        elif file_sha256(metadata) != record.metadata_sha256:
            problems.append(f"{metadata}: edited: it is not the wheel's METADATA ('factory "
                            "index' writes it again)")
    for name in sorted(present):
        if name.endswith(".whl") and name not in manifest.files:
            problems.append(f"{present[name]}: not in the manifest yet ('factory index' "
                            "indexes it)")
    return len(manifest.files), problems + _page_problems(layout, manifest)


def _page_problems(layout: Layout, manifest: Manifest) -> list[str]:
    """Every page, JSON document, browse file and script the manifest gives, rendered again
    and compared with what is published; and any file in the index's own folders that no
    update writes (a page slipped in)."""
    expected: dict[Path, bytes] = {}
    _Pages(layout, manifest, None, sink=expected).write()
    problems = []
    for path, data in sorted(expected.items()):
        try:
            same = path.read_bytes() == data
        except OSError:
            problems.append(f"{path}: missing ('factory index' writes it again)")
            continue
        if not same:
            problems.append(f"{path}: edited: not what the manifest gives ('factory index' "
                            "writes it again)")
    for folder in _owned_folders(layout.out):
        for path in sorted(folder.rglob("*")) if folder.is_dir() else []:
            if (path.is_file() or path.is_symlink()) and path not in expected:
                problems.append(f"{path}: no index update writes it: move it out")
    return problems


def yank(out: Path, name: str, version: str, label: str | None, reason: str,
         journal_key: bytes | None = None) -> list[str]:
    """Mark the files of one release yanked (PEP 592): every label, or only `label`'s.
    `version` is the public version (1.0.0) or a labelled one (1.0.0+cu130torch211). An
    empty reason is still a yank."""
    project = canonicalize_name(name)
    marked: list[str] = []

    def mark(manifest: Manifest) -> None:
        for filename, record in sorted(manifest.files.items()):
            if record.project != project or label not in (None, record.label):
                continue
            if version not in (record.version, record.version.split("+")[0]):
                continue
            manifest.files[filename] = record._replace(yanked=reason)
            marked.append(filename)
        if not marked:
            where = f" with label {label}" if label else ""
            raise ConfigError(f"no published file of {name} {version}{where} in {out}",
                              key="yank")

    update_index(out, change=mark, journal_key=journal_key)
    return marked


class _Scan:
    """A record for every wheel in files/: from the manifest while the file's size and mtime
    are unchanged (or, for `trusted` names, while it is there), from what the build read of a
    file it just published, read again otherwise. A file whose bytes changed under a published
    name keeps its published record unless `force`; it and every file that is not a readable
    wheel are reported in `problems`."""

    def __init__(self, layout: Layout, manifest: Manifest, force: bool,
                 trusted: set[str] | None, published: Mapping[str, WheelFile],
                 by_build: bool, journal: Mapping[str, Pending]) -> None:
        self.layout = layout
        self.known = manifest.files
        self.force = force
        self.trusted = trusted
        self.published = published
        self.problems: list[str] = []
        self.by_build = by_build  # a build's update: it indexes no stray file
        self.withdrawn = manifest.withdrawn
        # wheels a build moved into files/ and no update indexed yet: a killed build's, or
        # another build's into the same folder that is still running
        self.journal = journal

    def records(self) -> dict[str, FileRecord]:
        records: dict[str, FileRecord] = {}
        remove_abandoned_temporaries(self.layout.files)
        with os.scandir(self.layout.files) as scan:
            entries = list(scan)
        names = {entry.name for entry in entries}
        for entry in entries:
            name = entry.name
            if not name.endswith(".whl"):
                continue
            record = self._record(entry, names)
            if record is not None:
                records[name] = _attested(record, f"{name}.provenance" in names)
        return records

    def _record(self, entry: os.DirEntry[str], names: set[str]) -> FileRecord | None:
        name, path = entry.name, Path(entry.path)
        known = self.known.get(name)
        if not entry.is_file(follow_symlinks=False):
            self.problems.append(f"{path}: is not a wheel file (a folder or a link named like "
                                 "one); move it out of files/")
            return None
        if self.trusted is not None and name in self.trusted and known is not None:
            return known
        # a build's update takes a file no build of its own published only where a journal
        # note stands for it, and then only with the noted bytes
        unclaimed = self.by_build and known is None and name not in self.published
        noted = self.journal.get(name) if unclaimed else None
        if unclaimed and noted is None:
            self.problems.append(f"{path}: no build published it, so it is left out of the "
                                 "index; move it out of files/ (or run 'factory index' to "
                                 "index a wheel put there by hand)")
            return None
        info = entry.stat(follow_symlinks=False)
        if known is not None and known.size == info.st_size and \
                known.mtime_ns == info.st_mtime_ns:
            if self.trusted is None or name + ".metadata" not in names:
                self._check_metadata(path, known)
            return known
        fresh = self.published.get(name)
        try:
            if fresh is not None and fresh.size == info.st_size:
                record = file_record(fresh, info.st_mtime_ns)
            else:
                fresh, record = None, read_file_record(path)
        except WheelReadError as exc:
            if known is not None:
                self.problems.append(f"{exc.render()}; it was published with sha256 "
                                     f"{known.sha256[:12]}: restore the published file")
                return known
            self.problems.append(f"{exc.render()}: move it out of files/")
            return None
        if noted is not None and noted.sha256 != record.sha256:
            self.problems.append(f"{path}: not the bytes the build of {noted.cell} published "
                                 f"(sha256 {noted.sha256[:12]}, now {record.sha256[:12]}), so "
                                 "it is left out of the index; build the cell again")
            return None
        once = self.withdrawn.get(name)
        if known is None and once is not None and once != record.sha256 and not self.force:
            self.problems.append(
                f"{path}: this name was published with sha256 {once[:12]} and its file removed "
                f"since; published files are immutable, so other bytes ({record.sha256[:12]}) "
                "are not indexed under it: raise the version, or pass --force")
            return None
        if known is not None:
            if known.sha256 != record.sha256 and not self.force:
                self.problems.append(
                    f"{path}: changed after it was published (sha256 {known.sha256[:12]}, now "
                    f"{record.sha256[:12]}); published files are immutable: restore it, or pass "
                    "--force to publish the new bytes under the same name")
                return known
            record = record._replace(yanked=known.yanked, upload_time=known.upload_time)
        self._check_metadata(path, record, fresh.metadata if fresh is not None else None)
        return record

    def _check_metadata(self, wheel: Path, record: FileRecord,
                        metadata: bytes | None = None) -> None:
        """<wheel>.metadata with the wheel's METADATA (PEP 658); an edited one is written
        again, and reported."""
        target = wheel.with_name(wheel.name + ".metadata")
        if target.is_file() and not target.is_symlink():
            if file_sha256(target) == record.metadata_sha256:
                return
            self.problems.append(f"{target}: was edited (it is not the wheel's METADATA); "
                                 "written again from the wheel")
        try:
            data = metadata if metadata is not None else metadata_bytes(wheel)
        except WheelReadError as exc:
            self.problems.append(f"{exc.render()}: its .metadata cannot be written; restore "
                                 "the published wheel")
            return
        if hashlib.sha256(data).hexdigest() != record.metadata_sha256:
            self.problems.append(f"{wheel}: its METADATA is not the published one: the wheel "
                                 "changed after it was published; restore it")
            return
        write_atomic(target, data)


def _provenance_base(layout: Layout) -> str | None:
    """The full URL of files/ where the index is served, once factory attest --url said it:
    provenance files are linked by full URL (PEP 740), so not before."""
    try:
        url = layout.public_url.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return url.rstrip("/") + "/files/" if url else None


def _attested(record: FileRecord, provenance: bool) -> FileRecord:
    """The record with whether a PEP 740 provenance file lies beside the wheel (factory
    attest), which its pages then link."""
    if bool(record.summary.get("provenance")) == provenance:
        return record
    summary = {key: value for key, value in record.summary.items() if key != "provenance"}
    return record._replace(summary={**summary, "provenance": True} if provenance else summary)


def _indexes(manifest: Manifest) -> dict[str, dict[str, list[FileRecord]]]:
    """index name (simple, cu130torch211/simple, variants/torch211/simple) -> project -> its
    files in that index. A wheel is in the index of its label; a stable-ABI wheel in those of
    the cells it serves instead (its own label names a build, not a cell a user has); a file
    without a label (pure Python) in every cell's index; a variant wheel in the variants index
    of each torch release it serves (variants.py). Every file is in the combined index."""
    catalogue = cell_catalogue(manifest.cells.values())
    targets: dict[str, list[str]] = {}
    for name, record in manifest.files.items():
        if record.summary.get("variant") is not None:
            targets[name] = variant_indexes(record, catalogue)
            continue
        if record.label is None:
            continue
        served = served_cells(record, catalogue)
        labels = [label for label, _, _ in served] if record.summary.get("stable_abi") \
            else [record.label]
        targets[name] = [f"{label}/{COMBINED}" for label in labels]
    indexes: dict[str, dict[str, list[FileRecord]]] = {
        index: defaultdict(list) for names in targets.values() for index in names}
    indexes[COMBINED] = defaultdict(list)
    every_cell = [name for name in indexes
                  if name != COMBINED and not name.startswith(VARIANTS + "/")]
    for name, record in manifest.files.items():
        for index in [*targets.get(name, every_cell), COMBINED]:
            indexes[index][record.project].append(record)
    return indexes


class _Pages:
    """Writes the pages of one update, in the order that keeps every link valid."""

    def __init__(self, layout: Layout, manifest: Manifest,
                 previous: Manifest | None, sink: dict[Path, bytes] | None = None) -> None:
        self.layout = layout
        self.manifest = manifest
        self.previous = previous  # None: render everything
        self.sink = sink  # given: every page is put there, nothing on disk is touched
        self.indexes = _indexes(manifest)
        self.provenance = _provenance_base(layout)
        self.labels = {name.split("/")[0] for name in self.indexes
                       if name != COMBINED and not name.startswith(VARIANTS + "/")}
        self.written = 0
        self.removed = 0
        self.put: set[Path] = set()  # every file this update gives
        self.folders: set[Path] = set()  # known to exist
        self.new_folders: set[Path] = set()  # made by this update: nothing to compare with

    def write(self) -> None:
        old_indexes = _indexes(self.previous) if self.previous else {}
        changed = None if self.previous is None else _changed_projects(old_indexes,
                                                                        self.indexes)
        roots = []
        for name, projects in sorted(self.indexes.items()):
            base = self.layout.out / name
            files_url = "../" * (name.count("/") + 2) + "files/"
            for project, records in sorted(projects.items()):
                if changed is None or name in changed.get(project, ()):
                    documents = self._variants_documents(base / project, project, records)
                    self._put(base / project / "index.html",
                              project_html(project, records, files_url, documents,
                                           self.provenance))
                    self._put(base / project / "index.json",
                              project_json(project, records, files_url, documents,
                                           self.provenance))
            old = set(old_indexes.get(name, {}))
            if changed is None or old != set(projects) or not (base / "index.json").is_file():
                display = {p: sorted(rs, key=lambda r: r.filename)[0].display_name
                           for p, rs in projects.items()}
                roots.append((base, old, set(projects), display))
        for base, _old, _new, display in roots:
            self._put(base / "index.html", root_html(display))
            self._put(base / "index.json", root_json(display))
        self._write_browse(changed)
        for base, old, new, _display in roots:
            self._remove_projects(base, (old - new) if changed is not None else None, new)
        self._remove_indexes(set(old_indexes) - set(self.indexes) if changed is not None
                             else None)
        if changed is None:
            self._remove_stale_pages()

    def _remove_stale_pages(self) -> None:
        """In a full update: every page in the index's own folders that no update gives (one a
        killed update left behind, a project's index.json without its index.html), and the
        folders that leaves empty. Other files there are left for --verify to name."""
        if self.sink is not None:
            return
        out = self.layout.out
        for folder in _owned_folders(out):
            if not folder.is_dir():
                continue
            for path in sorted(folder.rglob("*"), reverse=True):  # files before their folders
                if path.is_dir() and not path.is_symlink():
                    if not any(path.iterdir()):
                        path.rmdir()
                elif path not in self.put and _is_page(path, out):
                    path.unlink()
                    self.removed += 1

    def _write_browse(self, changed: dict[str, set[str]] | None) -> None:
        out = self.layout.out
        by_project: dict[str, list[FileRecord]] = defaultdict(list)
        for record in self.manifest.files.values():
            by_project[record.project].append(record)
        cells_changed = self.previous is None or self.previous.cells != self.manifest.cells
        cells_by_project: dict[str, list[CellOutcome]] = defaultdict(list)
        for outcome in self.manifest.cells.values():
            cells_by_project[canonicalize_name(outcome.kernel)].append(outcome)
        for project in sorted(by_project.keys() | cells_by_project.keys()):
            if changed is None or cells_changed or project in changed:
                self._put(out / "browse" / f"{project}.json",
                          browse_project(project, by_project[project],
                                         cells_by_project[project]))
        self._put(out / "browse.json", browse_index(self.manifest))
        self._put(out / "doctor.py", files("factory").joinpath("doctor.py").read_bytes())
        for name in ASSETS:
            self._put(out / name, asset(name))
        if changed is None and self.sink is None and (out / "browse").is_dir():
            for stale in (out / "browse").glob("*.json"):
                if stale.stem not in by_project and stale.stem not in cells_by_project:
                    stale.unlink()
                    self.removed += 1

    def _variants_documents(self, folder: Path, project: str,
                            records: list[FileRecord]) -> list[tuple[str, str]]:
        """{name}-{version}-variants.json of each release on the page that has variant
        wheels, written beside the page before it (PEP 825 asks every page that lists variant
        wheels to link it); one no release needs any more is removed. Its (name, sha256)."""
        documents = variants_files(project, records)
        for name, data in sorted(documents.items()):
            self._put(folder / name, data)
        if self.sink is None and folder.is_dir():
            for stale in folder.glob("*-variants.json"):
                if stale.name not in documents and stale.is_file():
                    stale.unlink()
                    self.removed += 1
        return [(name, hashlib.sha256(data).hexdigest())
                for name, data in sorted(documents.items())]

    def _put(self, path: Path, data: bytes) -> None:
        self.put.add(path)
        if self.sink is not None:
            self.sink[path] = data
            return
        folder = path.parent
        if folder not in self.folders:
            if not folder.is_dir():
                folder.mkdir(parents=True)
                self.new_folders.add(folder)
            self.folders.add(folder)
        if folder not in self.new_folders:
            try:
                if path.read_bytes() == data:
                    return
            except OSError:
                pass
        write_atomic(path, data)
        self.written += 1

    def _remove_projects(self, base: Path, gone: set[str] | None, keep: set[str]) -> None:
        """Project folders no root page links any more (all of them in a full update)."""
        if self.sink is not None:
            return
        if gone is None:
            gone = {folder.name for folder in base.iterdir() if folder.is_dir()} - keep
        for project in gone:
            folder = base / project
            if _is_page_folder(folder):
                shutil.rmtree(folder)
                self.removed += 1

    def _remove_indexes(self, gone: set[str] | None) -> None:
        """Per-cell indexes whose label has no wheel any more."""
        if self.sink is not None:
            return
        out = self.layout.out
        if gone is None:
            gone = {simple.relative_to(out).as_posix() for simple in _cell_indexes(out)} - \
                set(self.indexes)
        for name in gone:
            simple = out / name
            if simple.is_dir() and _is_page_folder(simple):
                shutil.rmtree(simple)
                for parent in (simple.parent, simple.parent.parent):
                    if parent != out and parent.is_dir() and not any(parent.iterdir()):
                        parent.rmdir()
                self.removed += 1


def _changed_projects(before: dict[str, dict[str, list[FileRecord]]],
                      after: dict[str, dict[str, list[FileRecord]]]) -> dict[str, set[str]]:
    """project -> the indexes whose page of it changed: a file added, removed, yanked, or
    listed in other cells (a stable-ABI wheel, when the cells it serves change)."""
    changed: dict[str, set[str]] = defaultdict(set)
    empty: dict[str, list[FileRecord]] = {}
    for name in before.keys() | after.keys():
        old, new = before.get(name, empty), after.get(name, empty)
        for project in old.keys() | new.keys():
            if old.get(project) != new.get(project):
                changed[project].add(name)
    return changed


def _cell_indexes(out: Path) -> list[Path]:
    """The per-cell and variants indexes' simple/ folders present in `out`."""
    return [*out.glob(f"*/{COMBINED}"), *out.glob(f"{VARIANTS}/*/{COMBINED}")]


def _owned_folders(out: Path) -> list[Path]:
    """The folders only index updates write: the combined index, the browse data and every
    per-cell and variants index."""
    return [out / COMBINED, out / "browse", *_cell_indexes(out)]


def _is_page(path: Path, out: Path) -> bool:
    """A file of the kind an index update writes: a page, its JSON, a variants document, a
    project's browse data."""
    if path.is_symlink() or not path.is_file():
        return False
    if path.parent == out / "browse":
        return path.suffix == ".json"
    return path.name in ("index.html", "index.json") or path.name.endswith("-variants.json")


def _is_page_folder(folder: Path) -> bool:
    """Only folders the index itself wrote are ever removed."""
    return (folder / "index.html").is_file() and (folder / "index.json").is_file()
