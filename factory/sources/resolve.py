"""From matrix.yaml's kernel entries (path:, git:, hub:) to read-only source trees, with or
without the lock file.

Every kind gives a tree and the revision that names it: the commit for git and Hub sources, the
content digest for a plain folder. The wheel version is the matrix's, else a vX.Y.Z tag on the
resolved commit.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol, cast

from packaging.version import InvalidVersion, Version

from .. import defaults
from ..config import lockfile
from ..config.model import KernelEntry, Matrix, SourceKind, SourceRequest
from ..config.project import project_kind, static_version
from ..errors import ConfigError, SourceError, SourceRefused
from ..outputs.files import ZIP_EPOCH
from ..system.process import ProcessError, bounded_run
from .git import COMMIT_ID, GitFetcher
from .hub import HubFetcher
from .tree import GitState, SourceTree, resolve_path_source, scan_tree

__all__ = ["FETCHERS", "Fetcher", "Resolved", "Sources", "resolve_kernels", "version_from_tags"]

_VERSION_TAG = re.compile(r"v(\d[0-9A-Za-z.!+-]*)")


@dataclass(frozen=True)
class Resolved:
    entry: KernelEntry
    tree: SourceTree
    version: str | None  # None: neither the matrix nor a tag gives one


def version_from_tags(tags: list[str]) -> tuple[str, str] | None:
    """The highest vX.Y.Z tag as (version, tag); tags that are not versions are ignored."""
    found = []
    for tag in tags:
        match = _VERSION_TAG.fullmatch(tag)
        if not match:
            continue
        try:
            version = Version(match[1])
        except InvalidVersion:
            continue
        if version.local is None:
            found.append((version, tag))
    if not found:
        return None
    version, tag = max(found)
    return str(version), tag


class Fetcher(Protocol):
    """One kind of source (matrix.yaml's `path:`, `git:`, `hub:`): its tree at the revision a
    request names or at a pinned commit, and the tags that name a tree's revision."""

    pinned: bool  # whether a commit names its trees (one a lock can pin), unlike a folder

    def tree(self, request: SourceRequest, pin: str | None) -> SourceTree: ...

    def tags(self, request: SourceRequest, tree: SourceTree) -> list[str]: ...


class _Folder:
    """A folder on this machine, named by its content; its tags are those of its work
    tree's HEAD, when it is clean."""

    pinned = False

    def __init__(self, cache: Path, offline: bool) -> None:
        del cache, offline  # a folder is read where it is

    def tree(self, request: SourceRequest, pin: str | None) -> SourceTree:
        assert request.folder is not None  # the matrix gives a path source its folder
        return resolve_path_source(request.folder)

    def tags(self, request: SourceRequest, tree: SourceTree) -> list[str]:
        if tree.git is None or tree.git.dirty:
            return []
        try:
            done = bounded_run(["git", "-C", str(tree.root), "tag", "--points-at", "HEAD"],
                               defaults.TOOL_TIMEOUT)
        except ProcessError:
            return []
        return done.stdout.split() if done.returncode == 0 else []


class _Git:
    """A git repository, by URL or as a local repository's folder."""

    pinned = True

    def __init__(self, cache: Path, offline: bool) -> None:
        self.git = GitFetcher(cache, offline)

    def tree(self, request: SourceRequest, pin: str | None) -> SourceTree:
        url = _git_url(request)
        commit, ref = (pin, None) if pin else self.git.resolve(url, request.revision or "HEAD")
        root, when = self.git.tree(url, commit, ref, request.subdir)
        return _fetched_tree(request, commit, root, when)

    def tags(self, request: SourceRequest, tree: SourceTree) -> list[str]:
        return self.git.tags_at(_git_url(request), tree.revision)


class _Hub:
    """A Hugging Face Hub repository."""

    pinned = True

    def __init__(self, cache: Path, offline: bool) -> None:
        self.hub = HubFetcher(cache, offline)

    def tree(self, request: SourceRequest, pin: str | None) -> SourceTree:
        commit, root, when = self.hub.fetch(request.location, pin or request.revision or "main",
                                            request.subdir)
        return _fetched_tree(request, commit, root, when if when is not None else ZIP_EPOCH)

    def tags(self, request: SourceRequest, tree: SourceTree) -> list[str]:
        return self.hub.tags_at(tree.location, tree.revision)


# Each kind of source and what fetches it, made with <cache>/sources and whether offline: a
# new kind is one fetcher and one line here (and its keys in config/matrix/kernels.py).
FETCHERS: dict[SourceKind, Callable[[Path, bool], Fetcher]] = {
    "path": _Folder, "git": _Git, "hub": _Hub}


class Sources:
    """Fetches sources into <cache>/sources; `offline` uses only what is there already."""

    def __init__(self, cache: Path, offline: bool = False) -> None:
        self.fetchers = {kind: make(cache / "sources", offline)
                         for kind, make in FETCHERS.items()}

    def fetcher(self, kind: str) -> Fetcher:
        """The fetcher of a kind of source; a kind the factory does not know is refused."""
        found = self.fetchers.get(cast(SourceKind, kind))
        if found is None:
            raise SourceRefused(f"'{kind}' is not a kind of source the factory fetches "
                                f"({', '.join(self.fetchers)})")
        return found

    def resolve(self, entry: KernelEntry, matrix: Path, pin: str | None = None,
                version: str | None = None) -> Resolved:
        """The entry's tree; `pin` fetches that commit instead of looking up the rev, and a
        known `version` (the lock's) is taken without looking at tags."""
        request = entry.source
        try:
            fetcher = self.fetcher(request.kind)
            tree = fetcher.tree(request, pin)
            version = version or entry.version
            if version is None:
                # A rev that is itself a version tag names the commit it resolved to, even
                # offline, when the remote's tags cannot be listed.
                found = version_from_tags([*fetcher.tags(request, tree),
                                           request.revision or ""])
                if found:
                    version = found[0]
        except SourceRefused as error:
            raise ConfigError(error.message, file=matrix, line=entry.line,
                              key=f"{entry.key}.{request.kind}") from None
        except SourceError as error:
            raise SourceError(f"{matrix.name}:{entry.line}: {entry.key}: {error}") from None
        return Resolved(entry, tree, version)


def _fetched_tree(request: SourceRequest, commit: str, root: Path, when: int) -> SourceTree:
    """A git or Hub commit's tree: named by the commit, dated by its time (never dirty)."""
    digest, _ = scan_tree(root)
    return SourceTree(root, commit, request.kind, request.location, when,
                      GitState(commit, False, when), digest, request.subdir, request.revision)


def _git_url(request: SourceRequest) -> str:
    """What git fetches from: the URL, or a local repository's absolute path."""
    return str(request.folder) if request.folder else request.location


def resolve_kernels(matrix: Matrix, cache: Path, *, offline: bool, locked: bool,
                    say: Callable[[str], None]) -> list[Resolved]:
    """Every kernel's source. `locked` builds the lock's commits and refuses a source that
    moved or changed; otherwise the revs are resolved afresh and a lock that differs is only
    noted (a plain build never writes the lock)."""
    sources = Sources(cache, offline)
    path = lockfile.lock_path(matrix.path)
    pins = None
    if locked:
        if not path.is_file():
            raise ConfigError(f"there is no lock file: run `factory lock {matrix.path.name}` "
                              "first", file=path, key="--locked")
        pins = lockfile.read(path)
        stale = lockfile.unused(list(matrix.kernels), pins)
        if stale:
            raise ConfigError(f"{stale[0].request.describe()} is locked, but "
                              f"{matrix.path.name} no longer lists it; run `factory lock "
                              f"{matrix.path.name}`", file=path, line=stale[0].line, key="kernel")
    resolved = []
    for entry in matrix.kernels:
        if pins is None:
            result = sources.resolve(entry, matrix.path)
        else:
            result = _resolve_locked(sources, entry, pins, path, matrix, offline, say)
        if result.version is None and project_kind(result.tree.root, entry.kind) == "pep517":
            result = replace(result, version=static_version(result.tree.root))
        if result.version is None:
            tree = result.tree
            what = "the folder's HEAD commit" if not sources.fetcher(tree.kind).pinned else \
                f"commit {tree.revision[:12]} of {tree.location}"
            raise ConfigError(f"no wheel version: add `version: X.Y.Z` to this entry, or tag "
                              f"{what} as vX.Y.Z", file=matrix.path, line=entry.line,
                              key=f"{entry.key}.version")
        resolved.append(result)
    if pins is None and path.is_file():
        _note_lock_differences(resolved, path, say)
    return resolved


def _resolve_locked(sources: Sources, entry: KernelEntry,
                    pins: dict[tuple[str, str, str], lockfile.Locked],
                    path: Path, matrix: Matrix, offline: bool,
                    say: Callable[[str], None]) -> Resolved:
    pin = lockfile.pin_for(entry, pins, path, matrix.path)
    rev = entry.source.revision or ""
    if not sources.fetcher(entry.source.kind).pinned:
        result = sources.resolve(entry, matrix.path, version=pin.version)
    elif offline or COMMIT_ID.fullmatch(rev):
        result = sources.resolve(entry, matrix.path, pin=pin.commit, version=pin.version)
        if offline and not COMMIT_ID.fullmatch(rev):
            say(f"note: offline, so whether {entry.source.describe()} still points at "
                f"{pin.commit[:12]} was not checked")
    else:
        result = sources.resolve(entry, matrix.path, version=pin.version)
        if result.tree.revision != pin.commit:
            raise ConfigError(f"{entry.source.describe()} moved: it now resolves to "
                              f"{result.tree.revision[:12]}, but the lock pins "
                              f"{pin.commit[:12]}. Run `factory lock {matrix.path.name}` to take "
                              "the new commit, or set the rev to the pinned commit",
                              file=path, line=pin.line, key="kernel.commit")
    if result.tree.digest != pin.tree:
        raise ConfigError(f"the content of {entry.source.describe()} changed: its files now "
                          f"hash to {result.tree.digest[:12]}, the lock has {pin.tree[:12]}. "
                          f"Run `factory lock {matrix.path.name}` if the change is wanted",
                          file=path, line=pin.line, key="kernel.tree")
    return result


def _note_lock_differences(resolved: list[Resolved], path: Path,
                           say: Callable[[str], None]) -> None:
    try:
        pins = lockfile.read(path)
    except ConfigError as error:
        say(f"note: {error} (the lock is only read with --locked)")
        return
    for result in resolved:
        pin = pins.get(result.entry.source.identity)
        if pin is not None and (pin.commit, pin.tree) != (result.tree.revision,
                                                          result.tree.digest):
            say(f"note: {path.name} pins {pin.request.describe()} at {pin.commit[:12]}; building "
                f"{result.tree.revision[:12]} (`--locked` builds the pinned one, `factory lock` "
                "updates the lock)")
