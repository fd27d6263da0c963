"""What compiling a unit costs: its seconds and its compiler's peak memory as earlier builds
measured them, else an estimate from the source's size and the number of archs it is built for.

Builds record what they measure in a cost book (compile/costbook.py: <object cache>/costs/
<kernel>.json, one entry per cell and source), read before planning and handed in here as plain
mappings. The plan splits a long cell across jobs with these costs, and a build starts its
longest units first and runs as many compilers as their peaks fit in the memory.

The units of a cell are cut into shards from the estimate and the matrix's own cost book (a
`costs:` folder committed beside it), never from a machine's book: the plan machine and every
shard machine must cut the same shards, whatever their caches hold.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import defaults
from .model import Cell, Unit

__all__ = ["UnitCost", "cell_work", "cost_key", "estimated_seconds", "shard_count",
           "shard_of", "unit_memory"]


@dataclass(frozen=True)
class UnitCost:
    """One measured compile: wall seconds times the threads it ran with (the work it is on one
    core), and the peak memory of its largest process (None where it was not measured). With
    `at_least`, a compiler stopped at a time limit after `seconds`: the unit takes longer."""

    seconds: float
    peak: int | None
    archs: int
    at_least: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"seconds": round(self.seconds, 2), "peak": self.peak, "archs": self.archs,
                **({"at_least": True} if self.at_least else {})}

    @staticmethod
    def from_json(data: Any) -> UnitCost | None:
        try:
            peak = data.get("peak")
            return UnitCost(float(data["seconds"]), int(peak) if peak is not None else None,
                            max(1, int(data["archs"])), data.get("at_least") is True)
        except (AttributeError, KeyError, TypeError, ValueError):
            return None


def cost_key(cell: Cell, unit: Unit) -> str:
    return f"{cell.key}/{unit.source}"


def _kind(unit: Unit) -> str:
    return "cuda" if unit.is_cuda else "cxx"


def _archs(unit: Unit) -> int:
    return len(unit.archs) if unit.is_cuda else 1


def _size_estimate(cell: Cell, unit: Unit) -> float:
    """Seconds from the source's size and arch count (no build measured it yet)."""
    kib = cell.facts.sizes.get(unit.source, 0) / 1024
    rates = defaults.UNIT_SECONDS
    return rates["base"] + rates["per_kib"] * kib + rates["per_arch"] * _archs(unit)


def _measured(cell: Cell, unit: Unit, book: Mapping[str, UnitCost],
              slowest: bool = False) -> UnitCost | None:
    """This cell's measurement of the unit, else another cell's of the same source, else the
    mean (with `slowest`, the largest) of the measured units of the kernel most like it
    (_similar)."""
    exact = book.get(cost_key(cell, unit))
    if exact is not None:
        return exact
    suffix = f"/{unit.source}"
    others = [cost for key, cost in sorted(book.items()) if key.endswith(suffix)]
    return others[-1] if others else _similar(unit, book, slowest)


def _words(source: str) -> frozenset[str]:
    """The words of a unit's name that say which family it is of: a word of digits alone
    numbers a member (natten's generated hopper_fna_bwd/source_2.cu is a sibling of
    hopper_fna_bwd/source_0.cu, not of hopper_fna/source_2.cu)."""
    stem = str(Path(source).with_suffix(""))
    return frozenset(word for word in re.split(r"[^0-9A-Za-z]+", stem.lower())
                     if word and not word.isdigit())


def _similar(unit: Unit, book: Mapping[str, UnitCost], slowest: bool = False) -> UnitCost | None:
    """Kernels compile families of near-identical units, one template instantiation each
    (flash_fwd_hdim128_fp16_sm80.cu beside flash_fwd_hdim128_bf16_sm80.cu), whose costs are
    alike and far from what their few lines suggest. An unmeasured unit is given the mean cost
    per arch of the measured units of the same kind whose names share the largest part of its
    words (at least half), when there are any; with `slowest`, the largest of them."""
    words = _words(unit.source)
    suffix = Path(unit.source).suffix
    scored: dict[float, list[UnitCost]] = {}
    for key, cost in book.items():
        source = key.split("/", 1)[-1]
        if Path(source).suffix != suffix:
            continue
        other = _words(source)
        score = len(words & other) / max(1, len(words | other))
        if score >= 0.5:
            scored.setdefault(score, []).append(cost)
    if not scored:
        return None
    closest = scored[max(scored)]
    peaks = [cost.peak for cost in closest if cost.peak]
    per_arch = [cost.seconds / cost.archs for cost in closest]
    return UnitCost(max(per_arch) if slowest else sum(per_arch) / len(per_arch),
                    max(peaks) if peaks else None, 1)


def estimated_seconds(cell: Cell, unit: Unit, book: Mapping[str, UnitCost] | None = None,
                      slowest: bool = False) -> float:
    """The unit's work in core-seconds: measured (scaled to this cell's arch count) or estimated.
    With `slowest`, for deciding whether it can still end before a time limit, a unit measured
    only through the units most like it takes the slowest of them, not their mean: a family's
    units can differ tenfold (natten's generated source_N.cu files each hold kernels for other
    archs, and a kernel guarded out of this arch compiles to nothing), and a unit started on
    the family's mean is work thrown away at the limit."""
    measured = _measured(cell, unit, book, slowest) if book else None
    if measured is None:
        return _size_estimate(cell, unit)
    seconds = measured.seconds * _archs(unit) / measured.archs
    if measured.at_least and book:
        # stopped at a time limit: at least that long, and as long as the units like it
        suffix = f"/{unit.source}"
        others = {key: cost for key, cost in book.items() if not key.endswith(suffix)}
        return max(seconds, estimated_seconds(cell, unit, others, slowest))
    return seconds


def cell_work(cell: Cell, book: Mapping[str, UnitCost] | None = None,
              held: frozenset[str] = frozenset()) -> tuple[int, float]:
    """The cell's units and their work in core-seconds, those `held` (sources whose objects a
    cache holds) left out. A cell whose build writes its own compile commands (a setup.py
    project's) has the units its builds were seen to compile, as they measured them: this
    cell's, else those of the kernel's cell seen with the most (its builds for another torch
    or CPython compile the same sources); none before its first build."""
    if not cell.kind.units_seen:
        units = [unit for unit in cell.units if unit.compiled and unit.source not in held]
        return len(units), sum(estimated_seconds(cell, unit, book) for unit in units)
    seen: dict[str, dict[str, float]] = {}
    for key, cost in (book or {}).items():
        cell_key, _, source = key.partition("/")
        seen.setdefault(cell_key, {})[source] = cost.seconds
    found = seen.get(cell.key) or max(seen.values(), key=len, default={})
    left = {source: seconds for source, seconds in found.items() if source not in held}
    return len(left), sum(left.values())


def unit_memory(cell: Cell, unit: Unit, threads: int,
                book: Mapping[str, UnitCost] | None = None) -> int:
    """What a compiler of the unit running `threads` threads may take: the measured peak of its
    largest process (else the default per thread) once per thread, a bound from above."""
    measured = _measured(cell, unit, book) if book else None
    per_thread = measured.peak if measured and measured.peak else defaults.UNIT_MEMORY[_kind(unit)]
    return per_thread * max(1, threads)


def shard_of(cell: Cell, count: int,
             book: Mapping[str, UnitCost] | None = None) -> list[set[str]]:
    """The cell's units cut into `count` shards of about equal estimated work (longest first,
    each into the lightest shard so far): the sources of each shard. A pure function of the
    source and `book`, which must be the same on every machine (the matrix's own cost book,
    never a machine's), so every machine cuts the same shards."""
    shards: list[set[str]] = [set() for _ in range(count)]
    loads = [0.0] * count
    work = {unit.source: estimated_seconds(cell, unit, book)
            for unit in cell.units if unit.compiled}
    for source in sorted(work, key=lambda source: (-work[source], source)):
        lightest = min(range(count), key=lambda index: (loads[index], index))
        shards[lightest].add(source)
        loads[lightest] += work[source]
    return shards


def shard_count(seconds: float, limit: float, cores: int, units: int) -> int:
    """Shards needed for a cell of `seconds` core-seconds to compile within `limit` seconds on
    machines of `cores` cores (never more shards than units)."""
    return max(1, min(units, math.ceil(seconds / max(1, cores) / limit)))
