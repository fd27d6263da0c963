"""matrix.lock: the exact sources a matrix was resolved to, so a later build takes the same.

`factory lock MATRIX` writes it (atomically) beside the matrix; `factory build --locked` builds
exactly the commits and trees it names and refuses to go on when a source moved or changed.
A plain `factory build` never writes it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from ..errors import ConfigError
from ..outputs.files import write_atomic
from ..values.versions import Version
from .model import SOURCE_KINDS, KernelEntry, Matrix, ResolvedTorch, SourceKind, SourceRequest
from .nodes import Node, load_toml
from .wheelhouse import wheelhouse_digest

__all__ = ["Locked", "LockedDependency", "LockedTorch", "LockedWheelhouse", "check_wheelhouses",
           "lock_path", "lock_location", "pin_for", "read", "read_dependencies", "read_torches",
           "read_wheelhouses", "render", "unused", "write"]

LOCK_VERSION = 1
_HEADER = """\
# The sources `factory build --locked {matrix}` builds: written by `factory lock {matrix}`.
# Commit it beside the matrix; `factory lock` again takes newer commits (--upgrade: torch too).
"""


@dataclass(frozen=True)
class Locked:
    """One kernel's pinned source."""

    name: str
    kind: SourceKind
    location: str
    subdir: str | None
    requested: str | None  # the rev the matrix asked for when the lock was written
    commit: str  # the resolved commit (a content digest for plain folders)
    tree: str  # sha256 of the kernel's files (source.tree_digest)
    version: str
    line: int | None = None

    @property
    def request(self) -> SourceRequest:
        """The matrix entry this was resolved from (which names it, and how it reads)."""
        return SourceRequest(self.kind, self.location, self.requested, self.subdir)


@dataclass(frozen=True)
class LockedDependency:
    """One C++ dependency's pinned origin: the commit, or the wheel's or folder's sha256."""

    name: str
    kind: str
    location: str
    requested: str | None
    revision: str
    line: int | None = None


@dataclass(frozen=True)
class LockedTorch:
    """One torch release `torch: {latest: N}` resolved to, on the index it was read from."""

    release: str  # major.minor
    version: str
    cuda: str  # the CUDA major.minor of the index's build
    index: str
    pre: bool = False  # resolved with release candidates
    line: int | None = None
    pythons: tuple[str, ...] = ()  # the CPythons the index has its wheels for

    @property
    def resolved(self) -> ResolvedTorch:
        return ResolvedTorch(Version(self.release), self.version, Version(self.cuda),
                             self.pythons)


@dataclass(frozen=True)
class LockedWheelhouse:
    """A wheelhouse of the matrix: where it is, and the digest of its wheels."""

    location: str  # relative to the matrix where it lies below it
    digest: str  # config/wheelhouse.py's wheelhouse_digest
    line: int | None = None


def lock_location(folder: Path, matrix: Path) -> str:
    """How the lock names a folder: relative to the matrix's, where it lies below it."""
    base = matrix.parent.resolve()
    return folder.relative_to(base).as_posix() if folder.is_relative_to(base) else str(folder)


def lock_path(matrix: Path) -> Path:
    return matrix.with_suffix(".lock")


def render(matrix: Path, entries: list[Locked],
           dependencies: list[LockedDependency] | None = None,
           torches: list[LockedTorch] | None = None,
           wheelhouses: list[LockedWheelhouse] | None = None) -> str:
    lines = [_HEADER.format(matrix=matrix.name), f"lock-version = {LOCK_VERSION}"]
    tables: list[tuple[str, object, tuple[str, ...]]] = [
        ("kernel", entry, ("name", "kind", "location", "subdir", "requested", "commit", "tree",
                           "version")) for entry in entries]
    tables += [("dependency", entry, ("name", "kind", "location", "requested", "revision"))
               for entry in dependencies or []]
    tables += [("torch", entry, ("release", "version", "cuda", "index", "pre", "pythons"))
               for entry in torches or []]
    tables += [("wheelhouse", entry, ("location", "digest")) for entry in wheelhouses or []]
    for table, entry, keys in tables:
        lines += ["", f"[[{table}]]"]
        for key in keys:
            value = getattr(entry, key)
            if value is not None and value != ():
                lines.append(f"{key} = {json.dumps(value, ensure_ascii=False)}")
    return "\n".join(lines) + "\n"


def write(path: Path, text: str) -> bool:
    """Write the lock in one step; False when it already said exactly that."""
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    write_atomic(path, text)
    return True


def _tables(path: Path, name: str) -> list[Node]:
    """The lock's [[name]] tables, once its lock-version is one this factory reads."""
    top = load_toml(path).table(["lock-version", "kernel", "dependency", "torch", "wheelhouse"],
                                required=["lock-version"])
    if top["lock-version"].int() != LOCK_VERSION:
        raise top["lock-version"].error(f"this factory reads lock-version {LOCK_VERSION}; "
                                        "run `factory lock` to write the lock again")
    return top[name].list() if name in top else []


def read(path: Path) -> dict[tuple[str, str, str], Locked]:
    found: dict[tuple[str, str, str], Locked] = {}
    for node in _tables(path, "kernel"):
        fields = node.table(["name", "kind", "location", "subdir", "requested", "commit", "tree",
                             "version"],
                            required=["name", "kind", "location", "commit", "tree", "version"])
        text = {key: value.nonempty_str() for key, value in fields.items()}
        if text["kind"] not in SOURCE_KINDS:
            raise fields["kind"].error(f"unknown source kind '{text['kind']}' (known: "
                                       f"{', '.join(SOURCE_KINDS)})")
        entry = Locked(text["name"], cast(SourceKind, text["kind"]), text["location"],
                       text.get("subdir"), text.get("requested"), text["commit"], text["tree"],
                       text["version"], node.line)
        if entry.request.identity in found:
            raise node.error(f"{entry.request.describe()} is locked twice")
        found[entry.request.identity] = entry
    return found


def read_dependencies(path: Path) -> dict[str, LockedDependency]:
    """The lock's C++ dependencies by name."""
    found: dict[str, LockedDependency] = {}
    for node in _tables(path, "dependency"):
        fields = node.table(["name", "kind", "location", "requested", "revision"],
                            required=["name", "kind", "location", "revision"])
        text = {key: value.nonempty_str() for key, value in fields.items()}
        if text["name"] in found:
            raise node.error(f"dependency {text['name']} is locked twice")
        found[text["name"]] = LockedDependency(text["name"], text["kind"], text["location"],
                                               text.get("requested"), text["revision"],
                                               node.line)
    return found


def read_torches(path: Path) -> list[LockedTorch]:
    """The torch releases the lock pins `torch: {latest: N}` to, newest first."""
    found = []
    for node in _tables(path, "torch"):
        fields = node.table(["release", "version", "cuda", "index", "pre", "pythons"],
                            required=["release", "version", "cuda", "index"])
        text = {key: value.nonempty_str() for key, value in fields.items()
                if key not in ("pre", "pythons")}
        for key in ("release", "cuda"):
            if not re.fullmatch(r"\d+\.\d+", text[key]):
                raise fields[key].error(f"expected major.minor, got '{text[key]}'")
        pythons = fields["pythons"].str_list() if "pythons" in fields else ()
        for python in pythons:
            if not re.fullmatch(r"\d+\.\d+t?", python):
                raise fields["pythons"].error(f"expected CPython versions (3.14, 3.14t), got "
                                              f"'{python}'")
        found.append(LockedTorch(text["release"], text["version"], text["cuda"], text["index"],
                                 fields["pre"].bool() if "pre" in fields else False, node.line,
                                 pythons))
    return found


def read_wheelhouses(path: Path) -> dict[str, LockedWheelhouse]:
    """The lock's wheelhouses by location."""
    found: dict[str, LockedWheelhouse] = {}
    for node in _tables(path, "wheelhouse"):
        fields = node.table(["location", "digest"], required=["location", "digest"])
        text = {key: value.nonempty_str() for key, value in fields.items()}
        if not re.fullmatch(r"[0-9a-f]{64}", text["digest"]):
            raise fields["digest"].error("expected a sha256 (64 hex digits)")
        if text["location"] in found:
            raise node.error(f"wheelhouse {text['location']} is locked twice")
        found[text["location"]] = LockedWheelhouse(text["location"], text["digest"], node.line)
    return found


def check_wheelhouses(matrix: Matrix) -> None:
    """`--locked`: each wheelhouse of the matrix holds the wheels the lock was written with."""
    if not matrix.wheelhouses:
        return
    path = lock_path(matrix.path)
    locked = read_wheelhouses(path) if path.is_file() else {}
    for folder in matrix.wheelhouses:
        location = lock_location(folder, matrix.path)
        pin = locked.get(location)
        if pin is None:
            raise ConfigError(f"wheelhouse {location} is not in {path.name}; run `factory lock "
                              f"{matrix.path.name}` to add it", file=matrix.path,
                              line=matrix.wheelhouse_line, key="wheelhouse")
        if wheelhouse_digest(folder) != pin.digest:
            raise ConfigError(f"wheelhouse {location} holds other wheels than when "
                              f"{path.name} was written; run `factory lock "
                              f"{matrix.path.name}` to take them", file=matrix.path,
                              line=matrix.wheelhouse_line, key="wheelhouse")


def pin_for(entry: KernelEntry, locked: dict[tuple[str, str, str], Locked], path: Path,
            matrix: Path) -> Locked:
    """The lock's entry for a matrix entry, refusing a lock the matrix has moved away from."""
    source = entry.source
    pinned = locked.get(source.identity)
    if pinned is None:
        raise ConfigError(f"{source.describe()} is not in {path.name}; run `factory lock "
                          f"{matrix.name}` to add it", file=matrix, line=entry.line, key=entry.key)
    if pinned.requested != source.revision:
        raise ConfigError(f"asks for {source.revision!r} but {path.name} was written for "
                          f"{pinned.requested!r}; run `factory lock {matrix.name}` to lock the "
                          "new rev", file=matrix, line=entry.line, key=entry.key)
    if entry.version is not None and entry.version != pinned.version:
        raise ConfigError(f"gives version {entry.version} but {path.name} has {pinned.version}; "
                          f"run `factory lock {matrix.name}`", file=matrix, line=entry.line,
                          key=f"{entry.key}.version")
    return pinned


def unused(entries: list[KernelEntry],
           locked: dict[tuple[str, str, str], Locked]) -> list[Locked]:
    """Locked sources the matrix no longer lists."""
    wanted = {entry.source.identity for entry in entries}
    return [pin for identity, pin in locked.items() if identity not in wanted]
