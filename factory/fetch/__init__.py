"""Resolve matrix.yaml's kernel entries (path:, git:, hub:) to read-only source trees.

Every kind gives a tree and the revision that names it: the commit for git and Hub sources, the
content digest for a plain folder. The wheel version is the matrix's, else a vX.Y.Z tag on the
resolved commit.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from ..errors import ConfigError, SourceError
from ..matrix.model import KernelEntry, SourceRequest
from ..source import ZIP_EPOCH, GitState, SourceTree, resolve_path_source, scan_tree
from .git import GitFetcher
from .hub import HubFetcher

__all__ = ["Resolved", "Sources", "version_from_tags"]

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


class Sources:
    """Fetches sources into <cache>/sources; `offline` uses only what is there already."""

    def __init__(self, cache: Path, offline: bool = False) -> None:
        self.git = GitFetcher(cache / "sources", offline)
        self.hub = HubFetcher(cache / "sources", offline)

    def resolve(self, entry: KernelEntry, matrix: Path, pin: str | None = None,
                version: str | None = None) -> Resolved:
        """The entry's tree; `pin` fetches that commit instead of looking up the rev, and a
        known `version` (the lock's) is taken without looking at tags."""
        request = entry.source
        try:
            if request.kind == "path":
                tree = resolve_path_source(request.folder, matrix.parent)
            elif request.kind == "git":
                tree = self._git(entry, pin)
            else:
                tree = self._hub(entry, pin)
            version = version or entry.version
            if version is None:
                # A rev that is itself a version tag names the commit it resolved to, even
                # offline, when the remote's tags cannot be listed.
                tags = self._tags(entry, tree) + [request.revision or ""]
                found = version_from_tags(tags)
                if found:
                    version = found[0]
        except LookupError as error:
            raise ConfigError(str(error.args[0]), file=matrix, line=entry.line,
                              key=f"{entry.key}.{request.kind}") from None
        except SourceError as error:
            raise SourceError(f"{matrix.name}:{entry.line}: {entry.key}: {error}") from None
        return Resolved(entry, tree, version)

    def _git(self, entry: KernelEntry, pin: str | None) -> SourceTree:
        request = entry.source
        url = _git_url(entry)
        commit, ref = (pin, None) if pin else self.git.resolve(url, request.revision or "HEAD")
        root, when = self.git.tree(url, commit, ref, request.subdir)
        return _fetched_tree(request, commit, root, when)

    def _hub(self, entry: KernelEntry, pin: str | None) -> SourceTree:
        request = entry.source
        commit, root, when = self.hub.fetch(request.location, pin or request.revision or "main",
                                            request.subdir)
        return _fetched_tree(request, commit, root, when if when is not None else ZIP_EPOCH)

    def _tags(self, entry: KernelEntry, tree: SourceTree) -> list[str]:
        if tree.kind == "git":
            return self.git.tags_at(_git_url(entry), tree.revision)
        if tree.kind == "hub":
            return self.hub.tags_at(tree.location, tree.revision)
        if tree.git is None or tree.git.dirty:
            return []
        done = subprocess.run(["git", "-C", str(tree.root), "tag", "--points-at", "HEAD"],
                              capture_output=True, text=True)
        return done.stdout.split() if done.returncode == 0 else []


def _fetched_tree(request: SourceRequest, commit: str, root: Path, when: int) -> SourceTree:
    """A git or Hub commit's tree: named by the commit, dated by its time (never dirty)."""
    digest, _ = scan_tree(root)
    return SourceTree(root, commit, request.kind, request.location, when,
                      GitState(commit, False, when), digest, request.subdir, request.revision)


def _git_url(entry: KernelEntry) -> str:
    """What git fetches from: the URL, or a local repository's absolute path."""
    request = entry.source
    return str(request.folder) if request.folder else request.location
