"""The object cache: each compile unit's object, kept under a key that covers everything that
can change it, so that a cell stopped half way resumes where it stopped, a change to one file
recompiles one unit, and the jobs that compile a cell's shards hand their objects to the job
that links it.

ccache and sccache hit on few nvcc calls of torch-extension builds; the factory writes its
compile commands itself and its objects are reproducible, so it keys them itself:

    identity  sha256 of the command line, with the op namespace written as
              $TORCH_EXTENSION_NAME, the host compiler's command as $CXX, and without nvcc's
              --threads (it does not change the output), and of what the compilers are
              (compilers_identity). The cell's build folder stays in it:
              nvcc names a file's internal-linkage symbols after a hash of its physical path,
              so an object made in another folder has other bytes (builds of a cell use one
              fixed folder, so they share their objects)
    inputs    every file the compiler read, from its dependency file (-MD): path (the build
              folder as $WORK) and sha256 (files of a toolchain image, which this process
              cannot read, are sealed: the identity names the image instead); and the op
              namespace, for a unit whose files (or flags) name TORCH_EXTENSION_NAME
    key       sha256 of the identity and the inputs

The op namespace changes with every revision of the source (it is made from the commit). Only
a unit that names the macro can see its value, so only such a unit (the binding) is compiled
again for a new namespace alone; every other unit's object is kept.

On disk, under the cache's root:

    manifests/<id[:2]>/<identity>.json   the input sets seen for an identity, newest first
    objects/<key[:2]>/<key>.o            an object
    objects/<key[:2]>/<key>.json         its record: identity, source, size, sha256, mac

That is one part; builds in builder containers keep theirs in docker/<base>/ (written by the
container's user). Beside them, costs/<kernel>.json holds what each unit cost to compile
(compile/costbook.py).

An entry is the factory's only when its record's mac (HMAC-SHA256 of the key, identity, size
and sha256 under the object cache's key: trust/keys.py, kept outside the cache) holds, and its
manifest entry's input set gives its key: an object anyone else put in the cache folder, or an
entry pointed at another object, is compiled again (the log says so), and an import takes only
entries made under the same key.

A lookup reads the identity's manifest and takes the first input set whose files all still
have those hashes. Every file is written under a temporary name and renamed, so that builds
sharing the cache at once only ever see whole files. An object is checked against its record
after it is copied into the build folder, so what is linked is what was checked; an entry that
fails the check is removed and its unit compiled again. The cache is bounded: beyond its size
limit the least recently used objects go first (a hit touches its record).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import shutil
import stat
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from .. import defaults
from ..data.compilers.cached import WORK
from ..data.compilers.cached import read_depfile as depfile_names
from ..outputs.files import (
    atomic_target,
    copy_atomic,
    file_sha256,
    read_small_json,
    remove_abandoned_temporaries,
    write_atomic,
)
from ..system.cache import exclusive
from ..trust.keys import sign
from .held import HELD_FOLDER, holding
from .remote import RemoteStore

__all__ = ["DOCKER_PARTS", "ObjectCache", "ObjectStore", "evict", "merge_all",
           "compilers_identity", "names_namespace", "object_path", "read_depfile", "store_parts",
           "unit_identity"]

FORMAT = 1
DOCKER_PARTS = "docker"
SEALED = "sealed"  # the digest of a file of an image, which the identity names
NAMESPACE_MACRO = "TORCH_EXTENSION_NAME"
NAMESPACE = "$" + NAMESPACE_MACRO
HOST_COMPILER = "$CXX"
_HEX = re.compile(r"[0-9a-f]{64}")
_TEMPORARY = re.compile(r"/(?:tmp|var/tmp)/[^\s\"']+")

Note = Callable[[str], None]


def unit_identity(argv: Sequence[str], compilers: str, namespace: str,
                  cxx: str | None = None) -> str:
    """What decides a unit's object besides the files it reads: its command line (the op
    namespace written as $TORCH_EXTENSION_NAME, the host compiler `cxx` as $CXX) and what
    the compilers are (compilers_identity)."""
    def normal(arg: str) -> str:
        if cxx is not None and arg in (cxx, f"-ccbin={cxx}"):
            arg = arg.replace(cxx, HOST_COMPILER)
        return arg.replace(namespace, NAMESPACE)

    text = json.dumps({"format": FORMAT, "compilers": compilers,
                       "argv": [normal(arg) for arg in argv]})
    return hashlib.sha256(text.encode()).hexdigest()


def compilers_identity(versions: Sequence[str], driver: str) -> str:
    """What the compilers are, for every unit's identity: what each says of its version, and
    the commands the host compiler's driver runs for a compile (`-###`: its cc1plus and
    assembler with every option it adds), temporary file names left out. The host compiler's
    own path is not part of it, so the same compiler at another path, or a wrapper that
    changes only linking (-static-libstdc++), keeps every object; a wrapper that adds a
    compile option does not."""
    commands = [_TEMPORARY.sub("$TMP", line.strip()) for line in driver.splitlines()
                if line.startswith((" ", '"'))]
    return "\n".join([*versions, *commands])


def names_namespace(argv: Sequence[str], namespace: str) -> bool:
    """Whether a flag other than the factory's own definition names the namespace macro."""
    own = f"-D{NAMESPACE_MACRO}={namespace}"
    return any(NAMESPACE_MACRO in arg for arg in argv if arg != own)


def read_depfile(path: Path, cwd: Path) -> list[Path]:
    """The files a Makefile-style dependency file (`obj: a.cu b.h \\`) lists, absolute."""
    return [Path(name) for name in
            depfile_names(path.read_text(errors="surrogateescape"), str(cwd))]


class _Hashes:
    """sha256 of files, and whether they name the namespace macro, remembered while their size,
    times and inode stay the same: the units of a cell read the same thousand torch headers."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, int, int, int, int, int], tuple[str, bool]] = {}
        self._lock = threading.Lock()

    def of(self, path: Path) -> tuple[str, bool] | None:
        try:
            info = path.stat()
        except OSError:
            return None
        key = (str(path), info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns,
               info.st_ctime_ns)
        with self._lock:
            known = self._known.get(key)
        if known is not None:
            return known
        try:
            data = path.read_bytes()
        except OSError:
            return None
        found = (hashlib.sha256(data).hexdigest(), NAMESPACE_MACRO.encode() in data)
        with self._lock:
            self._known[key] = found
        return found


class ObjectStore:
    """One object cache folder. Safe to share between the threads of a build and between
    builds running at once."""

    def __init__(self, root: Path, key: bytes, remote: RemoteStore | None = None) -> None:
        self.root = root
        self.key = key
        self.remote = remote  # the store shared by machines, behind this one
        self._hashes = _Hashes()
        self._used: dict[str, str] = {}  # object key -> identity, for export
        self._lock = threading.Lock()

    # -- paths -------------------------------------------------------------------------------

    def _manifest(self, identity: str) -> Path:
        return self.root / "manifests" / identity[:2] / f"{identity}.json"

    def _object(self, key: str) -> Path:
        return object_path(self.root, key)

    def _record(self, key: str) -> Path:
        return self.root / "objects" / key[:2] / f"{key}.json"

    # -- lookup and store --------------------------------------------------------------------

    def fetch(self, identity: str, work: Path, namespace: str, target: Path, note: Note,
              sealed: bool = False) -> str | None:
        """Copy the object of the first input set the files in `work` (and elsewhere) and the
        op namespace still match to `target`, checked: this cache's, else the remote store's;
        its key, or None (compile it). `sealed`: the files outside `work` are those of an
        image the identity names, and are not read."""
        for entry in self.entries(identity):
            key = str(entry["object"])
            if self._matches(entry["inputs"], work, namespace, sealed) and \
                    self._copy_checked(key, identity, target, note):
                with self._lock:
                    self._used[key] = identity
                return key
        for entry in self.remote_entries(identity):
            key = str(entry["object"])
            if self._matches(entry["inputs"], work, namespace, sealed) and \
                    self._take(identity, entry, note) and \
                    self._copy_checked(key, identity, target, note):
                with self._lock:
                    self._used[key] = identity
                return key
        return None

    def remote_entries(self, identity: str) -> list[dict[str, Any]]:
        """The input sets the remote store holds for `identity` that this cache does not."""
        if self.remote is None or not self.remote.up:
            return []
        return [entry for entry in self.remote.entries(identity, _entries, _cache_key)
                if not self._record(entry["object"]).is_file()]

    def _take(self, identity: str, entry: dict[str, Any], note: Note) -> bool:
        """An entry of the remote store kept in this cache (marked as another machine's), when
        its record holds under this cache's key and its bytes are the record's."""
        assert self.remote is not None
        key = str(entry["object"])
        found = self.remote.record_and_object(key)
        if found is None:
            return False
        record, data = found
        if record.get("identity") != identity or not self.signed(key, record):
            note(f"object store {self.remote.description}: the entry {key[:12]} was not written "
                 "under this cache's key (or names another command); the unit is compiled here")
            return False
        self._object(key).parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self._object(key), data)
        write_atomic(self._record(key), json.dumps({**record, "imported": True}, indent=1))
        self._add_entries(identity, str(record.get("source", "")), [entry])
        return True

    def imported(self, key: str) -> bool:
        """Whether the entry came in with --import-objects (from another machine)."""
        record = _read_json(self._record(key))
        return isinstance(record, dict) and record.get("imported") is True

    def _matches(self, inputs: list[list[str]], work: Path, namespace: str,
                 sealed: bool) -> bool:
        for path, digest in inputs:
            if path == NAMESPACE:
                if digest != namespace:
                    return False
            elif self._digest(path, work, sealed) != digest:
                return False
        return True

    def _digest(self, path: str, work: Path, sealed: bool) -> str | None:
        if sealed and not path.startswith(WORK):
            return SEALED
        found = self._hashes.of(_real(path, work))
        return found[0] if found else None

    def _copy_checked(self, key: str, identity: str, target: Path, note: Note) -> bool:
        record = _read_json(self._record(key))
        try:
            shutil.copyfile(self._object(key), target)
        except OSError:
            return False  # evicted meanwhile, or never stored whole
        problem = self._problem(key, identity, record, lambda: file_sha256(target))
        if problem is None:
            return True
        target.unlink(missing_ok=True)
        self._discard(key, problem, note)
        return False

    def _problem(self, key: str, identity: str, record: Any,
                 actual: Callable[[], str]) -> str | None:
        """What is wrong with an entry whose object's sha256 is `actual()`; None when it holds
        (its record is then touched: the least recently used goes first)."""
        if not isinstance(record, dict) or record.get("identity") != identity:
            return "was damaged (its record is missing or names another command)"
        if not self.signed(key, record):
            return ("was not written under this cache's key (an entry made by another user, "
                    "machine or key)")
        digest = actual()
        if digest != record.get("sha256"):
            return f"was damaged (sha256 {digest[:12]} instead of {str(record.get('sha256'))[:12]})"
        os.utime(self._record(key))
        return None

    def _discard(self, key: str, problem: str, note: Note) -> None:
        note(f"object cache: the entry {key[:12]} {problem}; removed, the unit is compiled "
             "again")
        self._object(key).unlink(missing_ok=True)
        self._record(key).unlink(missing_ok=True)

    def entries(self, identity: str) -> list[dict[str, Any]]:
        """The input sets seen for `identity`, newest first, each with its object's key (an
        entry pointing at another input set's object left out)."""
        return [entry for entry in _entries(_read_json(self._manifest(identity)))
                if entry["object"] == _cache_key(identity, entry["inputs"])]

    def open_checked(self, identity: str, key: str, note: Note) -> BinaryIO | None:
        """The object of `identity`'s entry `key`, open at its start and checked against its
        record; None when there is no such entry or it fails the check (then it is removed).
        What is read from the handle is what was checked: entries are only ever replaced by
        renaming, never written in place."""
        if not any(entry["object"] == key for entry in self.entries(identity)):
            remote = [entry for entry in self.remote_entries(identity) if entry["object"] == key]
            if not remote or not self._take(identity, remote[0], note):
                return None
        record = _read_json(self._record(key))
        try:
            handle = open(self._object(key), "rb")  # noqa: SIM115 (returned open)
        except OSError:
            return None
        problem = self._problem(key, identity, record,
                                lambda: hashlib.file_digest(handle, "sha256").hexdigest())
        if problem is None:
            handle.seek(0)
            with self._lock:
                self._used[key] = identity
            return handle
        handle.close()
        self._discard(key, problem, note)
        return None

    def put(self, identity: str, source: str, work: Path, obj: Path, depfile: Path,
            cwd: Path, namespace: str, names_namespace: bool, sealed: bool = False,
            cell: str | None = None) -> str:
        """Keep a freshly compiled object under its key; the key. `names_namespace`: the
        command line names the namespace macro (its files are looked at here); `cell`: the
        holdings it is a unit of (compile/held.py)."""
        inputs = []
        for path in read_depfile(depfile, cwd):
            normal = _normal(path, work)
            if sealed and not normal.startswith(WORK):
                inputs.append([normal, SEALED])
                continue
            found = self._hashes.of(path)
            if found is None:  # a file that went away: the object cannot be keyed by it
                raise OSError(f"{path} was read by the compiler and is gone")
            inputs.append([normal, found[0]])
            names_namespace = names_namespace or found[1]
        if names_namespace:
            inputs.append([NAMESPACE, namespace])
        return self.keep(identity, source, inputs, lambda target: shutil.copyfile(obj, target),
                         None if cell is None else (cell, source))

    def keep(self, identity: str, source: str, inputs: list[list[str]],
             fill: Callable[[Path], object], held: tuple[str, str] | None = None) -> str:
        """Keep the object `fill` writes (to the path it is given) under the key of `identity`
        and `inputs`, signed, with a manifest entry; its key. `held`: the cell's holdings and
        the unit's name there, where a plan should find the unit held (compile/held.py)."""
        inputs = sorted(inputs)
        key = _cache_key(identity, inputs)
        target = self._object(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        with atomic_target(target) as temporary:
            fill(temporary)
            size, digest = temporary.stat().st_size, file_sha256(temporary)
        record = {"format": FORMAT, "identity": identity, "source": source, "size": size,
                  "sha256": digest, "mac": sign(self.key, key, identity, size, digest)}
        write_atomic(self._record(key), json.dumps(record, indent=1))
        entry = {"object": key, "inputs": inputs}
        self._add_entries(identity, source, [entry])
        with self._lock:
            self._used[key] = identity
        if self.remote is not None and self.remote.up:
            self.remote.put(identity, entry, record, target.read_bytes())
        if held is not None:
            self._hold(held[0], held[1], key, inputs)
        return key

    def _hold(self, cell: str, unit: str, key: str, inputs: list[list[str]]) -> None:
        """The object's holding, for a plan (compile/held.py): here, and in the remote store
        after the object it names."""
        mark = json.dumps(holding(self.key, cell, unit, key, inputs)).encode()
        folder = self.root / HELD_FOLDER / cell
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(folder / f"{key}.json", mark)
        if self.remote is not None and self.remote.up:
            self.remote.hold(cell, key, mark)

    def signed(self, key: str, record: dict[str, Any]) -> bool:
        """Whether the record's mac is this cache's key's for what it states."""
        mac = record.get("mac")
        return isinstance(mac, str) and hmac.compare_digest(
            mac, sign(self.key, key, record.get("identity"), record.get("size"),
                      record.get("sha256")))

    def _add_entries(self, identity: str, source: str, new: list[dict[str, Any]]) -> None:
        """The identity's manifest with `new` entries first; entries whose object is gone, and
        the oldest beyond the limit, dropped."""
        path = self._manifest(identity)
        path.parent.mkdir(parents=True, exist_ok=True)
        with exclusive(self.root / "manifests"):
            keys = {entry["object"] for entry in new}
            entries = new + [entry for entry in _entries(_read_json(path))
                             if entry["object"] not in keys]
            kept = [entry for entry in entries if self._object(entry["object"]).is_file()]
            kept = kept[:defaults.OBJECT_CACHE_MANIFEST_ENTRIES]
            write_atomic(path, json.dumps({"format": FORMAT, "source": source, "entries": kept}))

    # -- handing objects between machines ----------------------------------------------------

    @property
    def used(self) -> dict[str, str]:
        """The objects this store found or made in this process: key -> identity."""
        with self._lock:
            return dict(self._used)

    def mark_used(self, used: dict[str, str]) -> None:
        """Objects another process (a builder container) found or made in this store."""
        with self._lock:
            self._used.update(used)

    def export(self, used: dict[str, str], target: Path) -> int:
        """Copy the given objects, with their records and manifest entries, into `target` (an
        object cache of its own, e.g. a CI artifact). How many objects."""
        by_identity: dict[str, set[str]] = {}
        for key, identity in used.items():
            by_identity.setdefault(identity, set()).add(key)
        out = ObjectStore(target, self.key)
        copied = 0
        for identity, keys in sorted(by_identity.items()):
            manifest = _read_json(self._manifest(identity))
            entries = [entry for entry in _entries(manifest) if entry["object"] in keys]
            for key in sorted(keys):
                if _copy_entry(self, out, key):
                    copied += 1
            if entries:
                source = manifest.get("source", "") if isinstance(manifest, dict) else ""
                out._add_entries(identity, str(source), entries)
        _copy_holdings(self.root, target, set(used))
        return copied

    def merge(self, source: Path) -> tuple[int, int]:
        """Take in the objects of another object cache folder (shard jobs' artifacts): each is
        checked against its record, whose mac must be this cache's key's (the jobs of a run
        share it: $KERNEL_WHEEL_FACTORY_OBJECT_KEY), none replaces one already here. (taken,
        refused)."""
        other = ObjectStore(source, self.key)
        taken = refused = 0
        for record in sorted((source / "objects").glob("*/*.json")):
            key = record.stem
            if not _HEX.fullmatch(key) or record.is_symlink():
                refused += 1
                continue
            if self._record(key).is_file():
                continue
            data = _read_json(record)
            obj = other._object(key)
            if not isinstance(data, dict) or not self.signed(key, data) or \
                    not _regular_of_size(obj, data.get("size")) or \
                    file_sha256(obj) != data.get("sha256"):
                refused += 1
                continue
            _copy_entry(other, self, key, imported=True)
            taken += 1
        for manifest in sorted((source / "manifests").glob("*/*.json")):
            identity = manifest.stem
            data = _read_json(manifest)
            if not _HEX.fullmatch(identity) or manifest.is_symlink() or not isinstance(data, dict):
                continue
            self._add_entries(identity, str(data.get("source", "")), _entries(data))
        _copy_holdings(source, self.root, {record.stem for record in
                                           (source / "objects").glob("*/*.json")
                                           if self._record(record.stem).is_file()})
        return taken, refused


class ObjectCache:
    """An object cache root: its parts (one store each, made on first use), eviction, and the
    hand-over of objects between machines."""

    def __init__(self, root: Path, key: bytes, limit: int = defaults.OBJECT_CACHE_LIMIT,
                 remote: RemoteStore | None = None) -> None:
        self.root = root
        self.limit = limit
        self.key = key
        self.remote = remote  # the remote store, behind builds on this machine
        self._parts: dict[str, ObjectStore] = {}
        self._lock = threading.Lock()

    def part(self, name: str = "", own: bool = False) -> ObjectStore:
        """The store of builds on this machine (""), or of a builder image's containers;
        `own`: one this process writes itself (the remote store is behind it as behind "")."""
        with self._lock:
            if name not in self._parts:
                self._parts[name] = ObjectStore(self.root / name if name else self.root,
                                                self.key,
                                                self.remote if own or not name else None)
            return self._parts[name]

    def export(self, target: Path) -> int:
        """Copy the objects this process found or made, part by part, into `target` (an
        object cache of its own, made even when there are none: a shard of a setup.py
        project's cell may have no unit, and the job that links takes every shard's folder)."""
        (target / "objects").mkdir(parents=True, exist_ok=True)
        with self._lock:
            parts = dict(self._parts)
        return sum(store.export(store.used, target / name if name else target)
                   for name, store in sorted(parts.items()))

    def merge(self, source: Path) -> tuple[int, int]:
        return merge_all(source, self.root, self.key)

    def evict(self) -> tuple[int, int]:
        return evict(self.root, self.limit)


def object_path(part: Path, key: str) -> Path:
    """Where one part of an object cache keeps the object of a key."""
    return part / "objects" / key[:2] / f"{key}.o"


def store_parts(root: Path) -> list[Path]:
    """The object caches under a root: the root's own (builds on this machine) and one per
    builder image base (builds in containers, written by the container's user)."""
    return [root, *sorted(path for path in (root / DOCKER_PARTS).glob("*") if path.is_dir())]


def merge_all(source: Path, root: Path, key: bytes) -> tuple[int, int]:
    """Take in every part of another object cache root (shard jobs' artifacts) made under
    `key`."""
    taken = refused = 0
    for part in store_parts(source):
        if part.is_symlink():
            continue
        got, bad = ObjectStore(root / part.relative_to(source), key).merge(part)
        taken, refused = taken + got, refused + bad
    return taken, refused


def evict(root: Path, limit: int) -> tuple[int, int]:
    """Remove the least recently used objects of every part while the cache is over its limit
    (down to 80% of it), and abandoned temporaries: (objects removed, bytes kept)."""
    if not root.is_dir():
        return 0, 0
    with exclusive(root / "evict"):
        remove_abandoned_temporaries(root)
        entries = []
        for part in store_parts(root):
            for record in (part / "objects").glob("*/*.json"):
                obj = record.with_suffix(".o")
                try:
                    entries.append((record.stat().st_mtime, obj.stat().st_size, record, obj))
                except OSError:
                    continue  # being written, or half removed: the next eviction sees it
        total = sum(size for _, size, _, _ in entries)
        removed = 0
        if total > limit:
            for _, size, record, obj in sorted(entries, key=lambda item: item[0]):
                if total <= limit * 0.8:
                    break
                obj.unlink(missing_ok=True)
                record.unlink(missing_ok=True)
                total -= size
                removed += 1
        if removed:
            for part in store_parts(root):
                for holding_file in (part / HELD_FOLDER).glob("*/*.json"):
                    if not object_path(part, holding_file.stem).is_file():
                        holding_file.unlink(missing_ok=True)
        return removed, total


def _regular_of_size(path: Path, size: Any) -> bool:
    """Whether `path` is a regular file (no link, no FIFO) of the `size` its record states,
    which is at most MAX_OBJECT_SIZE: an import never reads more than that."""
    try:
        info = path.lstat()
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and isinstance(size, int) and \
        0 < size <= defaults.MAX_OBJECT_SIZE and info.st_size == size


def _copy_entry(source: ObjectStore, target: ObjectStore, key: str,
                imported: bool = False) -> bool:
    """Copy one entry; `imported` marks its record as another machine's (builds check a share
    of such objects by compiling them again)."""
    obj, record = source._object(key), source._record(key)
    if not obj.is_file() or not record.is_file():
        return False
    target._object(key).parent.mkdir(parents=True, exist_ok=True)
    copy_atomic(obj, target._object(key))
    data = _read_json(record) if imported else None
    if isinstance(data, dict):
        write_atomic(target._record(key), json.dumps({**data, "imported": True}, indent=1))
    else:
        copy_atomic(record, target._record(key))
    return True


def _copy_holdings(source: Path, target: Path, keys: set[str]) -> None:
    """The holdings of the objects `keys` copied from one cache folder to another (a plan
    checks each before it believes it: compile/held.py)."""
    for path in sorted((source / HELD_FOLDER).glob("*/*.json")):
        copy = target / path.relative_to(source)
        if path.stem in keys and _HEX.fullmatch(path.parent.name) and \
                not path.is_symlink() and not copy.exists():
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy_atomic(path, copy)


def _cache_key(identity: str, inputs: list[list[str]]) -> str:
    """An object's key: the sha256 of its command's identity and its sorted input set."""
    return hashlib.sha256(json.dumps([identity, inputs]).encode()).hexdigest()


def _normal(path: Path, work: Path) -> str:
    text = str(path)
    folder = str(work)
    return WORK + text[len(folder):] if text == folder or text.startswith(folder + "/") else text


def _real(path: str, work: Path) -> Path:
    return Path(str(work) + path[len(WORK):]) if path.startswith(WORK) else Path(path)


def _read_json(path: Path) -> Any:
    """A record's or manifest's JSON, or None (read_small_json)."""
    return read_small_json(path, defaults.MAX_RECORD_SIZE)


def _entries(manifest: Any) -> list[dict[str, Any]]:
    """A manifest's well-formed entries (a damaged manifest has none)."""
    if not isinstance(manifest, dict) or not isinstance(manifest.get("entries"), list):
        return []
    good = []
    for entry in manifest["entries"]:
        if not isinstance(entry, dict) or not _HEX.fullmatch(str(entry.get("object"))):
            continue
        inputs = entry.get("inputs")
        if isinstance(inputs, list) and all(isinstance(item, list) and len(item) == 2 and
                                            all(isinstance(part, str) for part in item)
                                            for item in inputs):
            good.append({"object": entry["object"], "inputs": inputs})
    return good

