"""C++ header libraries a kernel's build.toml `depends` on (cutlass_3_8, ...), fetched into the
cache the way kernel sources are.

Each name stands for one exact release (factory/data/depends.toml). Where it comes from:

    pypi    the release's wheel from PyPI (the default where PyPI publishes that exact release),
            installed by uv with its sha256 required, so the cache, --offline and a user's own
            index settings apply as for every other download
    git     a git repository at a rev (default: the project's repository at the release tag,
            which must still name the commit the table records); fetched by GitFetcher
    path    a folder with the git tree's layout (include/, tools/util/include/)
    wheel   a wheel file of the PyPI project

matrix.yaml's `depends:` chooses another origin per name (a mirror, a folder, a wheel file).
Only the header folders are kept, read-only, in the tree store; every path in them passes
the same safety rules as a kernel's files. What was taken is named by a revision: the commit
for git, the wheel's sha256, the folders' content digest for a plain folder; the lock pins
it, provenance records it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from .. import defaults
from ..config.model import DependencyEntry
from ..errors import ConfigError, SourceError, SourceRefused
from ..outputs.files import file_sha256
from ..policy import DependencyRelease, dependency_release
from ..system.process import ProcessError, bounded_run, first_error
from ..system.uv import uv_bin, uv_env
from .git import COMMIT_ID, GitFetcher
from .store import TreeStore
from .tree import scan_tree, source_files

__all__ = ["Dependency", "DependencyFetcher"]


@dataclass(frozen=True)
class Dependency:
    """One `depends` name, resolved: the release, where it came from, and its header folders."""

    name: str  # cutlass_3_8
    version: str  # 3.8.0
    kind: str  # pypi | git | path | wheel
    location: str  # the PyPI project, URL, folder or wheel file
    revision: str  # the commit, the wheel's sha256, or the folders' content digest
    folders: tuple[Path, ...]  # the header folders, in the order the compiler searches
    requested: str | None = None  # the rev asked for (git)

    def describe(self) -> str:
        what = {"pypi": "PyPI", "git": "git", "path": "folder", "wheel": "wheel"}[self.kind]
        at = f" @ {self.requested}" if self.requested else ""
        return (f"{self.name} ({self.version}) from {what} {self.location}{at} "
                f"[{self.revision[:12]}]")

    def record(self) -> dict[str, Any]:
        """What names it, for provenance, fingerprints and records: never where this machine
        keeps it."""
        return {"name": self.name, "version": self.version, "kind": self.kind,
                "location": self.location, "revision": self.revision,
                "requested": self.requested}

    @classmethod
    def from_record(cls, data: dict[str, Any], folders: tuple[Path, ...]) -> Dependency:
        return cls(str(data["name"]), str(data["version"]), str(data["kind"]),
                   str(data["location"]), str(data["revision"]), folders,
                   data.get("requested"))


class DependencyFetcher:
    """Fetches dependencies into <cache>/sources; `offline` uses only what is there already."""

    def __init__(self, cache: Path, offline: bool = False) -> None:
        self.cache = cache
        self.offline = offline
        self.git = GitFetcher(cache / "sources", offline)
        self.store = TreeStore(cache / "sources" / "trees")

    def fetch(self, name: str, entry: DependencyEntry | None, pin: str | None = None,
              ) -> Dependency:
        """The dependency `name` from the matrix's `entry` for it (None: the default origin);
        `pin` is the lock's revision, taken instead of looking the rev up."""
        release = dependency_release(name)
        assert release is not None, name  # planning refuses names with no release
        kind = entry.kind if entry else release.default_origin
        if kind == "git":
            return self._git(release, entry, pin)
        if kind == "path":
            assert entry is not None and entry.folder is not None
            return self._folder(release, entry)
        if kind == "wheel":
            assert entry is not None and entry.folder is not None
            return self._wheel_file(release, entry.folder, entry.location)
        return self._pypi(release)

    def again(self, record: dict[str, Any], base: Path) -> Dependency:
        """A recorded dependency fetched again, exactly: git by its commit, a wheel by its
        sha256; a folder or wheel file at its recorded place (relative to `base`) must still
        hold what was recorded."""
        name, kind, location = record["name"], record["kind"], record["location"]
        entry = None
        if kind != "pypi":
            folder = (base / location) if kind != "git" or "://" not in location else None
            entry = DependencyEntry(name, kind, location, record.get("requested"), folder)
        found = self.fetch(name, entry, pin=record["revision"] if kind == "git" else None)
        if found.revision != record["revision"]:
            raise SourceRefused(f"{found.describe()} is not the recorded {name} (revision "
                                f"{str(record['revision'])[:12]})")
        return found

    def _git(self, release: DependencyRelease, entry: DependencyEntry | None,
             pin: str | None) -> Dependency:
        url = (str(entry.folder) if entry.folder else entry.location) if entry else release.git
        rev = (entry.rev if entry and entry.rev else release.tag)
        if pin is not None:
            commit, ref = pin, None
        else:
            commit, ref = self.git.resolve(url, rev)
        if entry is None and not COMMIT_ID.fullmatch(rev) and commit != release.commit:
            raise SourceRefused(
                f"{release.git} tag {rev} now names commit {commit[:12]}, not "
                f"{release.commit[:12]} as when the factory's table of {release.name} was "
                "written; point depends."
                f"{release.name} at a repository you trust, or pin the commit as its rev")
        folders = tuple(self.git.tree(url, commit, ref, folder)[0] for folder in release.include)
        return Dependency(release.name, release.version, "git",
                          entry.location if entry else release.git, commit, folders, rev)

    def _folder(self, release: DependencyRelease, entry: DependencyEntry) -> Dependency:
        assert entry.folder is not None
        folders = []
        digests = []
        for folder in release.include:
            path = entry.folder / folder
            if not path.is_dir():
                raise SourceRefused(f"{entry.folder} has no {folder}/ folder: a folder given for "
                                    f"{release.name} must have the layout of {release.project}'s "
                                    "git tree")
            digests.append(scan_tree(path)[0])  # every file passes the path-safety rules
            folders.append(path)
        digest = hashlib.sha256("\0".join(digests).encode()).hexdigest()
        return Dependency(release.name, release.version, "path", entry.location, digest,
                          tuple(folders))

    def _pypi(self, release: DependencyRelease) -> Dependency:
        assert release.pypi and release.wheel_sha256
        requirement = release.default_location
        found = self._stored(release, "wheel", release.wheel_sha256)
        if found is None:
            with tempfile.TemporaryDirectory(prefix="kwf-depends-") as scratch:
                listing = Path(scratch) / "requirements.txt"
                listing.write_text(f"{requirement} --hash=sha256:{release.wheel_sha256}\n")
                self._install(["--require-hashes", "-r", str(listing)], Path(scratch) / "t",
                              f"{requirement} from PyPI")
                found = self._keep(release, "wheel", release.wheel_sha256, Path(scratch) / "t")
        return Dependency(release.name, release.version, "pypi", requirement,
                          release.wheel_sha256, found)

    def _wheel_file(self, release: DependencyRelease, path: Path, location: str) -> Dependency:
        if not path.is_file():
            raise SourceRefused(f"{path} is not a file")
        sha256 = file_sha256(path)
        if release.wheel_sha256 and sha256 != release.wheel_sha256:
            raise SourceRefused(
                f"{path} is not the {release.pypi} {release.wheel_version} wheel PyPI publishes "
                f"for {release.name} (sha256 {sha256[:12]}, that one's "
                f"{release.wheel_sha256[:12]}); give other builds of it as a folder (path:)")
        found = self._stored(release, "wheel", sha256)
        if found is None:
            _check_archive(path)
            with tempfile.TemporaryDirectory(prefix="kwf-depends-") as scratch:
                self._install([str(path)], Path(scratch) / "t", str(path))
                found = self._keep(release, "wheel", sha256, Path(scratch) / "t")
        return Dependency(release.name, release.version, "wheel", location, sha256, found)

    def _install(self, what: list[str], target: Path, describe: str) -> None:
        """uv unpacks the wheel (checking its hash where one is required) into `target`."""
        try:
            done = bounded_run(
                [uv_bin(), "pip", "install", "--quiet", "--no-deps", "--no-compile", "--target",
                 str(target), *what], defaults.STEP_TIMEOUT, defaults.LOG_OUTPUT_LIMIT,
                env={**os.environ, **uv_env(self.cache, self.offline)})
        except ProcessError as exc:
            raise SourceError(f"installing {describe} failed: {exc}") from None
        if done.returncode != 0:
            problem = first_error(done.stderr or done.stdout)
            if self.offline:
                problem += " (offline: only what uv's cache holds can be installed)"
            raise SourceError(f"installing {describe} failed: {problem}")

    def _stored(self, release: DependencyRelease, kind: str,
                revision: str) -> tuple[Path, ...] | None:
        found = [self.store.get(kind, revision, folder) for folder in release.include]
        if all(found):
            return tuple(item[0] for item in found if item)
        return None

    def _keep(self, release: DependencyRelease, kind: str, revision: str,
              unpacked: Path) -> tuple[Path, ...]:
        """The wheel's header folders, checked and copied into the tree store."""
        root = unpacked / (release.wheel_root or "")
        folders = []
        for folder in release.include:
            source = root / folder
            if not source.is_dir():
                raise SourceRefused(f"the {release.pypi or release.project} wheel has no "
                                    f"{release.wheel_root}/{folder}/ folder")
            try:
                source_files(source)
            except ConfigError as error:
                raise SourceRefused(error.message) from None
            folders.append(self.store.put(kind, revision, folder, {"name": release.name},
                                          partial(_copy_tree, source)))
        return tuple(folders)


def _check_archive(path: Path) -> None:
    """Refuse a wheel that would unpack into more than a header library holds (a zip bomb):
    too many members, too many bytes, or members inflating beyond any real source file's
    ratio. Read from the zip's directory, before anything is unpacked."""
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, OSError) as exc:
        raise SourceRefused(f"{path} is not a wheel (zip) file: {exc}") from None
    limits = defaults.DEPENDENCY_WHEEL_LIMITS
    total = sum(member.file_size for member in members)
    packed = sum(member.compress_size for member in members)
    if len(members) > limits["members"] or total > limits["bytes"]:
        raise SourceRefused(f"{path} unpacks into {len(members)} files of {total} bytes; a "
                            f"header library's wheel holds at most {limits['members']} files "
                            f"of {limits['bytes']} bytes")
    if total > limits["ratio"] * max(packed, 1) and total > 2**20:
        raise SourceRefused(f"{path} inflates {total // max(packed, 1)}-fold ({packed} bytes "
                            f"into {total}): more than any source files do")


def _copy_tree(source: Path, target: Path) -> None:
    shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)
