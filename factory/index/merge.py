"""`factory index --merge SOURCE...`: the output folders of several build jobs, and indexes
already published on the web, as one index.

A source is an output folder (a build job's artifact: its wheels, logs and cell records) or
the http(s) URL of a published index (where its `simple/` index is, such as a GitHub Pages
site the factory deployed), read as any simple repository is (remote.py): its wheels are
downloaded and their yanks kept, so a deploy that replaces the whole site keeps every release
published before.

Everything is checked before anything is written: a wheel name that two sources (or the
target) hold with different bytes stops the merge, since published files are immutable, and a
downloaded wheel must have the sha256 its index lists (one listed without a hash is downloaded
and hashed first). Then wheels, logs and cell records are copied in, and the index is made from
all of them, so it is the index one `factory build` of the whole matrix would have made.
"""

from __future__ import annotations

import re
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from packaging.utils import canonicalize_name

from .. import defaults
from ..errors import ConfigError, IndexConflict, SourceError
from ..outputs.files import copy_atomic, file_sha256
from ..outputs.layout import Layout, refuse_links
from .records import CellOutcome, Manifest, load_manifest
from .remote import ListedFile, SimpleIndex, TooLarge, stream_sha256
from .update import IndexSummary, update_index

if TYPE_CHECKING:  # imported where used: a merge of folders reads nothing over HTTP
    import requests

    from ..sources.http import BoundedSession

__all__ = ["is_url", "merge_outputs", "read_published_index"]

# When a cell appears in several folders (a job run again), the best outcome stands.
_RANK = {"built": 3, "unchanged": 3, "skipped": 2, "untested": 1, "failed": 1}
_WHEEL_NAME = re.compile(r"[A-Za-z0-9_.+-]+\.whl")
_ATTESTATION_FILES = (".provenance", ".publish.attestation")  # the first one is the link
_PROVENANCE_LIMIT = 4 * 2**20  # bytes: a provenance object holds a few attestations


def is_url(source: str | Path) -> bool:
    return isinstance(source, str) and source.startswith(("http://", "https://"))


def merge_outputs(out: Path, sources: list[str | Path], force: bool = False,
                  journal_key: bytes | None = None) -> IndexSummary:
    import requests

    refuse_links(out)  # before any wheel, log or record is copied in
    merge = _Merge(Layout(out), force)
    with tempfile.TemporaryDirectory(prefix="kwf-merge-") as scratch, \
            requests.Session() as session:  # downloads: each bounded by _download
        for source in sources:
            if is_url(source):
                merge.take_index(str(source), session, Path(scratch))
            else:
                merge.take_folder(Path(source), out)
        merge.fetch_attestations(session, Path(scratch))
        merge.copy_wheels(session, Path(scratch))
    merge.copy_records()
    return update_index(out, force=force, outcomes=merge.outcomes.values(), full=True,
                        change=merge.keep_history, journal_key=journal_key)


class _Merge:
    """What the sources of one merge hold, gathered before anything is written: each wheel's
    bytes (a file at hand, else a listed download), its sha256, the first time an index took
    it in and its yank, and each cell's best outcome."""

    def __init__(self, target: Layout, force: bool) -> None:
        self.target, self.force = target, force
        self.origins: dict[str, Path | ListedFile] = {}  # wheel name -> where its bytes are
        self.digests: dict[str, str] = {}
        self.outcomes: dict[str, CellOutcome] = {}
        self.yanks: dict[str, str] = {}
        self.entered: dict[str, str] = {}  # wheel name -> earliest time an index took it in
        self.folders: list[Path] = []
        self.present: dict[str, str] = {}  # wheel name -> sha256 of the target's copy
        # wheel name -> its attestation files (factory attest): <wheel>.provenance and
        # <wheel>.publish.attestation of a folder, the provenance URL an index lists
        self.attested: dict[str, list[Path] | str] = {}

    def offer(self, name: str, digest: str, origin: Path | ListedFile, where: str,
              uploaded: str | None) -> None:
        known = self.digests.get(name)
        if known is None and (self.target.files / name).is_file():
            known = self.present[name] = file_sha256(self.target.files / name)
        if known is not None and known != digest and not self.force:
            raise IndexConflict(f"{where} holds another {name} (sha256 {digest[:12]}, known "
                                f"as {known[:12]}); published files are immutable, so the "
                                "merge stops before writing anything")
        self.digests[name] = digest
        if uploaded is not None:
            self.entered[name] = min(uploaded, self.entered.get(name, uploaded))
        if not isinstance(self.origins.get(name), Path):  # bytes at hand beat a download
            self.origins[name] = origin

    def take_index(self, url: str, session: requests.Session, scratch: Path) -> None:
        """The wheels another server's index lists (those it gives no sha256 of, downloaded
        to hash them), with their yanks."""
        listed = read_published_index(url)
        assert listed is not None  # a missing root is refused with --merge named
        downloaded: dict[str, Path] = {}
        _download_all(session, [entry for entry in listed.values() if entry.sha256 is None],
                      scratch, downloaded)
        for name, entry in listed.items():
            digest = entry.sha256 or file_sha256(downloaded[name])
            self.offer(name, digest, downloaded.get(name, entry), url, entry.upload_time)
            if entry.provenance is not None:
                self.attested.setdefault(name, entry.provenance)
            if entry.yanked is not None:
                self.yanks[name] = entry.yanked

    def take_folder(self, folder: Path, out: Path) -> None:
        """The wheels a factory output folder's builds published, and its cells' outcomes."""
        layout = Layout(folder)
        if not layout.files.is_dir() and not layout.manifest.is_file():
            raise ConfigError("is not a factory output folder (no files/ and no "
                              ".factory/manifest.json)", file=folder, key="--merge")
        if folder.resolve() == out.resolve():
            raise ConfigError("is the output folder itself", file=folder, key="--merge")
        self.folders.append(folder)
        manifest = load_manifest(layout.manifest)
        for wheel in sorted(layout.files.glob("*.whl")) if layout.files.is_dir() else []:
            known = manifest.files.get(wheel.name)
            digest = file_sha256(wheel)
            # only what a build of that folder published and indexed: a wheel its manifest
            # does not record, or records with other bytes, was put there by something else
            if known is None or known.sha256 != digest:
                raise IndexConflict(
                    f"{wheel}: no build of {folder} published it (its manifest "
                    + ("does not record it" if known is None else
                       f"records sha256 {known.sha256[:12]}, the file has {digest[:12]}")
                    + "); nothing was merged: remove it, or run `factory index --out "
                    f"{folder}` to index a wheel put there by hand")
            self.offer(wheel.name, digest, wheel, str(wheel), known.upload_time)
            beside = [wheel.with_name(wheel.name + suffix) for suffix in _ATTESTATION_FILES]
            if beside[0].is_file():
                self.attested[wheel.name] = [path for path in beside if path.is_file()]
        for name, outcome in manifest.cells.items():
            old = self.outcomes.get(name)
            if old is None or _RANK.get(outcome.status, 0) >= _RANK.get(old.status, 0):
                self.outcomes[name] = outcome

    def copy_wheels(self, session: requests.Session, scratch: Path) -> None:
        """Every wheel the target lacks into its files/, downloads first fetched whole."""
        wheels: dict[str, Path] = {}
        remote: list[ListedFile] = []
        for name, origin in sorted(self.origins.items()):
            if self.present.get(name) == self.digests[name]:
                continue
            if isinstance(origin, Path):
                wheels[name] = origin
            else:
                remote.append(origin)
        _download_all(session, remote, scratch, wheels)
        self.target.files.mkdir(parents=True, exist_ok=True)
        for name, wheel in wheels.items():
            copy_atomic(wheel, self.target.files / name)
        for name, found in sorted(self.attested.items()):
            if isinstance(found, list) and \
                    not (self.target.files / f"{name}.provenance").exists():
                for path in found:
                    copy_atomic(path, self.target.files / path.name)

    def fetch_attestations(self, session: requests.Session, scratch: Path) -> None:
        """The provenance files an index lists for the wheels the target has none of,
        downloaded before anything is written: a wheel signed once keeps the provenance it was
        published with (published files are immutable)."""
        for name, origin in sorted(self.attested.items()):
            if isinstance(origin, str) and \
                    not (self.target.files / f"{name}.provenance").exists():
                fetched = scratch / f"{name}.provenance"
                _download(session, ListedFile(fetched.name, origin, None, None), fetched,
                          limit=_PROVENANCE_LIMIT)
                self.attested[name] = [fetched]

    def copy_records(self) -> None:
        """The logs and cell records of the merged folders."""
        for folder in self.folders:
            layout = Layout(folder)
            for source_folder, destination in ((layout.logs, self.target.logs),
                                               (layout.state, self.target.state)):
                for path in sorted(source_folder.glob("*")) if source_folder.is_dir() else []:
                    destination.mkdir(parents=True, exist_ok=True)
                    copy_atomic(path, destination / path.name)

    def keep_history(self, manifest: Manifest) -> None:
        """Yanks stay yanked, and each wheel keeps the time it first entered an index."""
        for name, reason in self.yanks.items():
            record = manifest.files.get(name)
            if record is not None and record.yanked is None:
                manifest.files[name] = record._replace(yanked=reason)
        for name, uploaded in self.entered.items():
            record = manifest.files.get(name)
            if record is not None and uploaded < record.upload_time:
                manifest.files[name] = record._replace(upload_time=uploaded)


def read_published_index(root: str,
                         key: str | None = "--merge") -> dict[str, ListedFile] | None:
    """The wheels a published index lists (every project of its simple/ root), by name; None
    when it has no simple/ root (a 404) and `key` is None, else that is refused. All its pages
    arrive within defaults.INDEX_DEADLINE, each at most defaults.PAGE_LIMIT."""
    from ..sources.http import BoundedSession

    with BoundedSession(defaults.INDEX_DEADLINE) as session:
        return _read_index(root, key, session)


def _read_index(root: str, key: str | None,
                session: BoundedSession) -> dict[str, ListedFile] | None:
    base = root if root.endswith("/") else root + "/"
    index = SimpleIndex(base + "simple/", session, timeout=defaults.DOWNLOAD_TIMEOUT,
                        failure=SourceError)
    projects = index.project_names()
    if projects is None:
        if key is None:
            return None
        raise ConfigError(f"{root} has no simple index ({index.url} answers HTTP 404)",
                          key=key)
    found: dict[str, ListedFile] = {}
    for project in projects:
        page = f"{index.url}{canonicalize_name(project)}/"
        for name, entry in index.project_files(canonicalize_name(project)).items():
            if not name.endswith(".whl"):
                continue
            if not _WHEEL_NAME.fullmatch(name):
                raise SourceError(f"{page} lists a file named {name!r}, which is not a wheel "
                                  "name; the merge stops before writing anything")
            found[name] = entry
    return found


def _download_all(session: requests.Session, entries: list[ListedFile], folder: Path,
                  into: dict[str, Path]) -> None:
    """Download files in parallel into `folder`, each checked against its listed sha256."""
    def one(entry: ListedFile) -> None:
        into[entry.filename] = _download(session, entry, folder / entry.filename)

    with ThreadPoolExecutor(max_workers=defaults.PARALLEL_TRANSFERS) as pool:
        list(pool.map(one, entries))


def _download(session: requests.Session, entry: ListedFile, path: Path,
              limit: int | None = None) -> Path:
    """`entry` downloaded to `path`, checked against its listed sha256; at most `limit` bytes
    (a provenance file's), else defaults.DOWNLOAD_LIMIT (a wheel's)."""
    import requests

    from ..sources.http import Overrun, within

    def fetch() -> str:
        with session.get(entry.url, stream=True, timeout=defaults.DOWNLOAD_TIMEOUT) as response:
            if not response.ok:
                raise SourceError(f"cannot download {entry.url}: HTTP {response.status_code} "
                                  f"{response.reason}")
            return stream_sha256(response, path, limit)

    try:
        digest = within(defaults.DOWNLOAD_DEADLINE, fetch, entry.url)
    except Overrun as exc:
        raise SourceError(f"{exc}; the merge stops before writing anything") from None
    except TooLarge as exc:
        what = "wheel" if limit is None else "provenance file"
        raise SourceError(f"{exc}: no {what} is that big; the merge stops before writing "
                          "anything") from None
    except (requests.RequestException, OSError) as exc:
        raise SourceError(f"cannot download {entry.url}: {type(exc).__name__}") from None
    if entry.sha256 is not None and digest != entry.sha256:
        host = urlsplit(entry.url).netloc
        raise SourceError(f"{entry.url} does not have the sha256 its index on {host} lists "
                          f"({digest[:12]}, listed {entry.sha256[:12]}); the merge stops "
                          "before writing anything")
    return path
