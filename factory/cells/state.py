"""A cell's state in the output folder (`.factory/cells/<cell>.json`): the wheel its last build
published (name and sha256), the fingerprint of everything that build depended on, its size
once installed, what proving it showed (loading it, the kernel's tests) and whether the kernel's
code ran outside the sandbox (`--unconfined`) while it was built or proven. The next build of
the same inputs keeps that wheel, and `factory test` adds its report. One codec for every
writer and reader of run.py.

Format 1; a state written before the format was named has the same fields. A state that is not
one (damaged, or of another format) reads as none, and the cell is built again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..outputs.files import read_small_json, write_atomic
from ..prove.load import LoadReport
from ..prove.tests import TestReport

__all__ = ["STATE_FORMAT", "CellState", "Proof"]

STATE_FORMAT = 1
_STATE_LIMIT = 16 * 2**20  # bytes: a state holds a test report, a few MB at the most


@dataclass(frozen=True)
class Proof:
    """A pure-Python wheel for all, imported and tested in one CUDA cell of the matrix (with
    that cell's torch): the cell's id, what its import gate saw, what its tests said."""

    cell: str
    loaded: LoadReport | None
    tests: TestReport | None

    def to_json(self) -> dict[str, Any]:
        return {"cell": self.cell, "loaded": self.loaded.to_json() if self.loaded else None,
                "tests": self.tests.to_json() if self.tests else None}

    @classmethod
    def from_json(cls, data: object) -> Proof | None:
        if not isinstance(data, dict) or not isinstance(data.get("cell"), str):
            return None
        return cls(data["cell"], LoadReport.from_json(data.get("loaded")),
                   TestReport.from_json(data.get("tests")))


@dataclass(frozen=True)
class CellState:
    fingerprint: str
    wheel: str  # its file name in files/
    sha256: str
    loaded: LoadReport | None = None
    tests: TestReport | None = None
    installed_size: int | None = None
    unconfined: bool = False  # the kernel's code ran with the user's rights (--unconfined)
    proofs: tuple[Proof, ...] = ()  # a pure-Python wheel for all: its gates in each CUDA cell

    def to_json(self) -> dict[str, Any]:
        return {"format": STATE_FORMAT, "fingerprint": self.fingerprint, "wheel": self.wheel,
                "sha256": self.sha256,
                "loaded": self.loaded.to_json() if self.loaded else None,
                "tests": self.tests.to_json() if self.tests else None,
                "installed_size": self.installed_size} | (
                    {"unconfined": True} if self.unconfined else {}) | (
                    {"proofs": [proof.to_json() for proof in self.proofs]} if self.proofs
                    else {})

    @classmethod
    def from_json(cls, data: object) -> CellState | None:
        if not isinstance(data, dict) or data.get("format", STATE_FORMAT) != STATE_FORMAT:
            return None
        fingerprint, wheel, sha256 = (data.get(key) for key in ("fingerprint", "wheel", "sha256"))
        if not (isinstance(fingerprint, str) and isinstance(wheel, str)
                and isinstance(sha256, str)):
            return None
        size = data.get("installed_size")
        proofs = data.get("proofs")
        return cls(fingerprint, wheel, sha256, LoadReport.from_json(data.get("loaded")),
                   TestReport.from_json(data.get("tests")),
                   size if isinstance(size, int) and not isinstance(size, bool) else None,
                   data.get("unconfined") is True,
                   tuple(proof for proof in map(Proof.from_json, proofs)
                         if proof is not None) if isinstance(proofs, list) else ())

    @classmethod
    def read(cls, path: Path) -> CellState | None:
        """The state at `path`; None where there is none, or it cannot be read (it lies in
        --out: read as a regular file, bounded)."""
        return cls.from_json(read_small_json(path, _STATE_LIMIT))

    def write(self, path: Path) -> None:
        write_atomic(path, json.dumps(self.to_json(), indent=1, sort_keys=True))
