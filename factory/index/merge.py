"""`factory index --merge SOURCE...`: the output folders of several build jobs, and indexes
already published on the web, as one index.

A source is an output folder (a build job's artifact: its wheels, logs and cell records) or
the http(s) URL of an index the factory published (where its `simple/index.json` is, such as
a GitHub Pages site): its wheels are downloaded and their yanks kept, so a deploy that
replaces the whole site keeps every release published before.

Everything is checked before anything is written: a wheel name that two sources (or the
target) hold with different bytes stops the merge, since published files are immutable, and a
downloaded wheel must have the sha256 its index lists. Then wheels, logs and cell records are
copied in, and the index is made from all of them, so it is the index one `factory build` of
the whole matrix would have made.
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin, urlsplit

from packaging.utils import canonicalize_name

from ..atomic import copy_atomic
from ..build import sha256_file
from ..errors import ConfigError, SourceError
from ..layout import Layout
from .records import CellOutcome, IndexConflict, Manifest, load_manifest
from .update import IndexSummary, update_index

# When a cell appears in several folders (a job run again), the best outcome stands.
_RANK = {"built": 3, "unchanged": 3, "skipped": 2, "failed": 1}
_WHEEL_NAME = re.compile(r"[A-Za-z0-9_.+-]+\.whl")
_TIMEOUT = 120


@dataclass(frozen=True)
class PublishedFile:
    """A wheel of a published index: where it is and what its index says of it."""

    url: str
    sha256: str
    yanked: str | None


def is_url(source: str | Path) -> bool:
    return isinstance(source, str) and source.startswith(("http://", "https://"))


def merge_outputs(out: Path, sources: list[str | Path], force: bool = False) -> IndexSummary:
    target = Layout(out)
    origins: dict[str, Path | PublishedFile] = {}  # wheel name -> where its bytes come from
    digests: dict[str, str] = {}
    outcomes: dict[str, CellOutcome] = {}
    yanks: dict[str, str] = {}
    folders: list[Path] = []
    present: dict[str, str] = {}  # wheel name -> sha256 of the target's copy

    def offer(name: str, digest: str, origin: Path | PublishedFile, where: str) -> None:
        known = digests.get(name)
        if known is None and (target.files / name).is_file():
            known = present[name] = sha256_file(target.files / name)
        if known is not None and known != digest and not force:
            raise IndexConflict(f"{where} holds another {name} (sha256 {digest[:12]}, known "
                                f"as {known[:12]}); published files are immutable, so the "
                                "merge stops before writing anything")
        digests[name] = digest
        if not isinstance(origins.get(name), Path):  # bytes at hand beat a download
            origins[name] = origin

    for source in sources:
        if is_url(source):
            for name, published in read_published_index(str(source)).items():
                offer(name, published.sha256, published, str(source))
                if published.yanked is not None:
                    yanks[name] = published.yanked
            continue
        folder = Path(source)
        layout = Layout(folder)
        if not layout.files.is_dir() and not layout.manifest.is_file():
            raise ConfigError("is not a factory output folder (no files/ and no "
                              ".factory/manifest.json)", file=folder, key="--merge")
        if folder.resolve() == out.resolve():
            raise ConfigError("is the output folder itself", file=folder, key="--merge")
        folders.append(folder)
        for wheel in sorted(layout.files.glob("*.whl")) if layout.files.is_dir() else []:
            offer(wheel.name, sha256_file(wheel), wheel, str(wheel))
        for name, outcome in load_manifest(layout.manifest).cells.items():
            old = outcomes.get(name)
            if old is None or _RANK.get(outcome.status, 0) >= _RANK.get(old.status, 0):
                outcomes[name] = outcome

    with tempfile.TemporaryDirectory(prefix="kwf-merge-") as scratch:
        wheels: dict[str, Path] = {}
        downloads: list[tuple[PublishedFile, Path]] = []
        for name, origin in sorted(origins.items()):
            if present.get(name) == digests[name]:
                continue
            if isinstance(origin, Path):
                wheels[name] = origin
            else:
                downloads.append((origin, Path(scratch) / name))
                wheels[name] = downloads[-1][1]
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(lambda item: _download(*item), downloads))
        target.files.mkdir(parents=True, exist_ok=True)
        for name, wheel in wheels.items():
            copy_atomic(wheel, target.files / name)
    for folder in folders:
        layout = Layout(folder)
        for source, destination in ((layout.logs, target.logs), (layout.state, target.state)):
            for path in sorted(source.glob("*")) if source.is_dir() else []:
                destination.mkdir(parents=True, exist_ok=True)
                copy_atomic(path, destination / path.name)

    def keep_yanks(manifest: Manifest) -> None:
        for name, reason in yanks.items():
            record = manifest.files.get(name)
            if record is not None and record.yanked is None:
                manifest.files[name] = record._replace(yanked=reason)

    return update_index(out, force=force, outcomes=outcomes.values(), full=True,
                        change=keep_yanks)


def read_published_index(root: str) -> dict[str, PublishedFile]:
    """The wheels an index the factory published lists, from its PEP 691 JSON pages."""
    base = root if root.endswith("/") else root + "/"
    listing = _get_json(urljoin(base, "simple/index.json"), root, first=True)
    found: dict[str, PublishedFile] = {}
    for project in listing.get("projects", []):
        page = urljoin(base, f"simple/{canonicalize_name(project['name'])}/index.json")
        for entry in _get_json(page, root).get("files", []):
            name = entry.get("filename", "")
            if not name.endswith(".whl"):
                continue
            if not _WHEEL_NAME.fullmatch(name):
                raise SourceError(f"{page} lists a file named {name!r}, which is not a wheel "
                                  "name; the merge stops before writing anything")
            yanked = entry.get("yanked", False)  # PEP 691: false, true or the reason
            reason = None if yanked is False else \
                yanked if isinstance(yanked, str) and yanked else "yanked"
            found[name] = PublishedFile(urljoin(page, entry["url"]),
                                        entry["hashes"]["sha256"].lower(), reason)
    return found


def _get_json(url: str, root: str, first: bool = False) -> dict:
    try:
        with urllib.request.urlopen(url, timeout=_TIMEOUT) as response:
            return json.load(response)
    except urllib.error.HTTPError as exc:
        if exc.code == 404 and first:
            raise ConfigError(f"has no simple/index.json: not an index the factory published "
                              f"(HTTP 404 for {url})", file=root, key="--merge") from None
        raise SourceError(f"{url}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise SourceError(f"cannot read {url}: {reason}") from None


def _download(published: PublishedFile, path: Path) -> Path:
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(published.url, timeout=_TIMEOUT) as response, \
                open(path, "wb") as handle:
            for block in iter(lambda: response.read(1 << 20), b""):
                digest.update(block)
                handle.write(block)
    except (urllib.error.URLError, OSError) as exc:
        raise SourceError(f"cannot download {published.url}: "
                          f"{getattr(exc, 'reason', exc)}") from None
    if digest.hexdigest() != published.sha256:
        host = urlsplit(published.url).netloc
        raise SourceError(f"{published.url} does not have the sha256 its index on {host} lists "
                          f"({digest.hexdigest()[:12]}, listed {published.sha256[:12]}); the "
                          "merge stops before writing anything")
    return path
