"""The cost book: what builds measured compiling each unit (plan/costs.py's `UnitCost`), kept
beside the object cache (<object cache>/costs/<kernel>.json, one entry per cell and source) and
read before a plan is made, so that the planner itself reads no file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from ..outputs.files import read_small_json, write_atomic
from ..plan.costs import UnitCost
from ..system.cache import exclusive

__all__ = ["COSTS_FOLDER", "CostBook", "known_costs"]

COSTS_FOLDER = "costs"  # the cost book's folder in an object cache and an exported one
_MAX_BOOK = 16 * 2**20  # a larger book is not read (a crafted import's)
_KERNEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class CostBook:
    """The costs builds measured, one JSON file per kernel, written atomically under a lock (builds
    sharing the cache add to the same book). A book travels: --export-objects copies the books
    of the kernels built into the folder it writes, --import-objects takes in what the local
    book lacks, and a matrix's `costs:` folder (one committed beside it) is read below the
    local book by every machine."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def _path(self, kernel: str) -> Path:
        return self.folder / f"{kernel}.json"

    def read(self, kernel: str) -> dict[str, UnitCost]:
        data = read_small_json(self._path(kernel), _MAX_BOOK)
        if not isinstance(data, dict):
            return {}
        costs = {key: UnitCost.from_json(value) for key, value in data.items()
                 if isinstance(key, str)}
        return {key: cost for key, cost in costs.items() if cost is not None}

    def record(self, kernel: str, measured: Mapping[str, UnitCost],
               keep_known: bool = False) -> None:
        """Add `measured` to the kernel's book (with `keep_known`, only what it lacks)."""
        if not measured:
            return
        path = self._path(kernel)
        self.folder.mkdir(parents=True, exist_ok=True)
        with exclusive(path):
            known = self.read(kernel)
            book = dict(measured) | known if keep_known else known | dict(measured)
            write_atomic(path, json.dumps({key: cost.to_json() for key, cost in
                                           sorted(book.items())}, indent=1))

    def export(self, kernels: Iterable[str], target: Path) -> int:
        """Write the books of `kernels` into `target` (an --export-objects folder's costs/):
        how many units they hold."""
        written = 0
        for kernel in sorted(set(kernels)):
            book = self.read(kernel)
            if book:
                CostBook(target).record(kernel, book)
                written += len(book)
        return written

    def merge(self, source: Path) -> int:
        """Take in the books of another folder (an --import-objects folder's costs/): the
        units this book lacks (its own measurements stay); a file that does not read as a
        book is left out. How many units came in."""
        taken = 0
        other = CostBook(source)
        for path in sorted(source.glob("*.json")) if source.is_dir() else []:
            kernel = path.stem
            if not _KERNEL_NAME.fullmatch(kernel):
                continue
            found = other.read(kernel)
            known = self.read(kernel)
            taken += sum(1 for key in found if key not in known)
            self.record(kernel, found, keep_known=True)
        return taken


def known_costs(kernel: str, books: Iterable[CostBook | None]) -> dict[str, UnitCost]:
    """The kernel's costs from several books, each later one's entries over the earlier ones'
    (the matrix's book, then this machine's)."""
    known: dict[str, UnitCost] = {}
    for book in books:
        if book is not None:
            known |= book.read(kernel)
    return known
