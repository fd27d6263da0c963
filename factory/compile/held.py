"""Which units of a cell the object caches already hold, as far as a plan can tell without a
toolchain: `factory plan` says it per cell, and leaves those units out of what is left to
compile (and of the shards it cuts).

An object's key needs the command line and the toolchain's files, which only a build has. So
each object a build keeps for a cell also gets a holding: the unit (its source, as the cost
book names it), the object's key, the project's files the compiler read (those staged from the
source, $WORK/src/..., with their sha256) and the op namespace where the unit names it, signed
under the object cache's key. Holdings lie beside the objects (held/<cell>/<key>.json in each
part of the object cache) and in the remote store (h/<cell>/<key>), each under a name of its
own, so no name is ever read and written back. <cell> is the sha256 of the project's identity
and the cell's key.

A unit is held when one of its holdings is signed under this key, names an object the local
cache still has (or lies in the remote store, which never evicts), and each project file it
lists has that hash in the source the plan resolved; a file the factory writes itself (absent
from the source) is left to the build. The toolchain's and torch's files are not looked at:
the cell pins their versions, and a build checks every file before it takes an object, so a
holding the build then refuses costs an estimate, never a wrong object.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from .. import defaults
from ..data.compilers.cached import WORK
from ..outputs.files import file_sha256, read_small_json
from ..trust.keys import sign

__all__ = ["HELD_FOLDER", "PROJECT_FILES", "cell_holdings", "held_units", "holding", "read_local"]

HELD_FOLDER = "held"
PROJECT_FILES = WORK + "/src/"  # where a build stages the project's source
FORMAT = 1
_HEX = re.compile(r"[0-9a-f]{64}")
_NAMESPACE = "$TORCH_EXTENSION_NAME"


def cell_holdings(project: str, cell_key: str) -> str:
    """The name a cell's holdings are kept under: its project's identity and the cell's key."""
    return hashlib.sha256(json.dumps([project, cell_key]).encode()).hexdigest()


def holding(key: bytes, cell: str, unit: str, obj: str,
            inputs: Iterable[list[str]]) -> dict[str, Any]:
    """The holding of the object `obj` of `unit` (a source as the cost book names it) for the
    cell whose holdings are `cell`: of its input set, the project's files and the namespace."""
    files = sorted([path.removeprefix(PROJECT_FILES), digest] for path, digest in inputs
                   if path.startswith(PROJECT_FILES) or path == _NAMESPACE)
    return {"format": FORMAT, "unit": unit, "object": obj, "files": files,
            "mac": sign(key, "held", cell, unit, obj, json.dumps(files))}


def held_units(key: bytes, cell: str, records: Iterable[Any], root: Path, namespace: str,
               present: Callable[[str], bool] = lambda obj: True,
               hashes: dict[Path, str | None] | None = None) -> set[str]:
    """The units of which one of `records` (holdings, as read) holds: signed under `key` for
    `cell`, naming an object that is `present`, each of its project files the same in the
    source at `root` (a file not there is the factory's own), and the op namespace the
    cell's. `hashes`: the files' sha256 hashed so far, kept across calls (the cells of one
    kernel read the same source)."""
    hashes = {} if hashes is None else hashes

    def digest(name: str) -> str | None:
        path = root / name
        if path not in hashes:
            safe = ".." not in Path(name).parts and not Path(name).is_absolute()
            hashes[path] = file_sha256(path) if safe and path.is_file() else None
        return hashes[path]

    held = set()
    for record in records:
        if not _well_formed(record):
            continue
        unit, obj, files = record["unit"], record["object"], record["files"]
        if unit in held or not hmac.compare_digest(
                record["mac"], sign(key, "held", cell, unit, obj, json.dumps(files))):
            continue
        same = all(value == namespace if name == _NAMESPACE else
                   digest(name) in (value, None) for name, value in files)
        if same and present(obj):
            held.add(unit)
    return held


def read_local(part: Path, cell: str) -> list[Any]:
    """The holdings one part of the object cache keeps for a cell."""
    folder = part / HELD_FOLDER / cell
    return [read_small_json(path, defaults.MAX_RECORD_SIZE)
            for path in sorted(folder.glob("*.json")) if _HEX.fullmatch(path.stem)] \
        if folder.is_dir() else []


def _well_formed(record: Any) -> bool:
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        return False
    files = record.get("files")
    return isinstance(record.get("unit"), str) and isinstance(record.get("mac"), str) and \
        _HEX.fullmatch(str(record.get("object"))) is not None and isinstance(files, list) and \
        all(isinstance(item, list) and len(item) == 2 and
            all(isinstance(part, str) for part in item) for item in files)
