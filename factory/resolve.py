"""From matrix.yaml's kernel entries to resolved sources, with or without the lock file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from . import lockfile
from .errors import ConfigError
from .fetch import Resolved, Sources
from .fetch.git import COMMIT_ID
from .matrix.model import KernelEntry, Matrix


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
        if result.version is None:
            tree = result.tree
            what = "the folder's HEAD commit" if tree.kind == "path" else \
                f"commit {tree.revision[:12]} of {tree.location}"
            raise ConfigError(f"no wheel version: add `version: X.Y.Z` to this entry, or tag "
                              f"{what} as vX.Y.Z", file=matrix.path, line=entry.line,
                              key=f"{entry.key}.version")
        resolved.append(result)
    if pins is None and path.is_file():
        _note_lock_differences(resolved, path, say)
    return resolved


def _resolve_locked(sources: Sources, entry: KernelEntry, pins: dict[tuple, lockfile.Locked],
                    path: Path, matrix: Matrix, offline: bool,
                    say: Callable[[str], None]) -> Resolved:
    pin = lockfile.pin_for(entry, pins, path, matrix.path)
    kind, rev = entry.source.kind, entry.source.revision or ""
    if kind == "path":
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
