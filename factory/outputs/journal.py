"""The publish journal: a build notes each wheel it is about to move into files/ before it moves
it, and an index update that has recorded the wheel drops the note.

A wheel in files/ that the manifest does not know is either one a build put there and has not
indexed yet (the build is still running, or was killed between the move and its index update)
or one nothing of the factory's put there. The note tells them apart: the first is indexed by
the next update, of whichever build, so a killed build leaves nothing a later one trips over and
two builds into one output folder index each other's wheels; the second is still refused.

Each note is .factory/publishing/<pid>-<wheel name>.json: {"wheel", "sha256", "cell", "mac"},
the mac an HMAC-SHA256 of the rest under the object cache's key (trust/keys.py,
kept outside --out). Anything that can write the output folder (a kernel's code run unconfined,
another user) can put a note there, so a note counts only with a mac the key gives: a forged
note, whether its sha256 is right or not, stands for nothing, and its wheel is refused as any
wheel no build published is. Where there is no key (a machine that never built), no note
counts.
"""

from __future__ import annotations

import hmac
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..trust.keys import sign
from .files import process_alive, read_small_json, write_atomic

__all__ = ["Pending", "note_publishing", "pending", "prune"]

_NOTE_LIMIT = 4096  # bytes: a note is one short JSON object


@dataclass(frozen=True)
class Pending:
    """A wheel a build moved (or was about to move) into files/."""

    wheel: str
    sha256: str
    cell: str
    pid: int
    note: Path


def note_publishing(journal: Path, key: bytes, wheel: str, sha256: str, cell: str) -> Path:
    """Note, before the move, that this process publishes `wheel` with these bytes (signed
    under the object cache's `key`)."""
    journal.mkdir(parents=True, exist_ok=True)
    note = journal / f"{os.getpid()}-{wheel}.json"
    mac = _mac(key, wheel, sha256, cell)
    write_atomic(note, json.dumps({"wheel": wheel, "sha256": sha256, "cell": cell, "mac": mac}))
    return note


def _mac(key: bytes, wheel: str, sha256: str, cell: str) -> str:
    return sign(key, "publish-journal", wheel, sha256, cell)


def pending(journal: Path, key: bytes | None) -> dict[str, Pending]:
    """The notes, by wheel name (a note that is not one of the factory's is ignored: one not
    signed under `key`, or one that is not a small regular file); none without a key."""
    found: dict[str, Pending] = {}
    if not journal.is_dir() or key is None:
        return found
    for note in sorted(journal.glob("*.json")):
        pid = note.name.split("-", 1)[0]
        try:
            data = read_small_json(note, _NOTE_LIMIT) if pid.isdigit() else None
            if not isinstance(data, dict):
                continue
            entry = Pending(str(data["wheel"]), str(data["sha256"]), str(data["cell"]),
                            int(pid), note)
            signed = hmac.compare_digest(str(data["mac"]), _mac(
                key, entry.wheel, entry.sha256, entry.cell))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if signed and note.name == f"{pid}-{entry.wheel}.json":
            found[entry.wheel] = entry
    return found


def prune(notes: Iterable[Pending], indexed: Mapping[str, str], files: Path) -> None:
    """Of `notes` (read by pending()), drop those of wheels the manifest now records with the
    noted bytes (`indexed`: name -> sha256), and those of dead processes whose wheel never
    reached files/."""
    for entry in notes:
        done = indexed.get(entry.wheel) == entry.sha256
        lost = not (files / entry.wheel).exists() and not process_alive(entry.pid)
        if done or lost:
            entry.note.unlink(missing_ok=True)
