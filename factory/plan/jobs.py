"""Split a plan for many machines: jobs (one builder image each, at most N cells) and shards.

Both are pure functions of the plan, so every runner of a CI fan-out computes the same split:
the plan job prints the jobs, and each build job builds `--job ID` (or `--shard I/N`) of the
same matrix. Cells are ordered by builder image, then id. Cells the plan skips cost nothing;
they travel with the first job (or shard), so a merged index records each of them once.

A cell too long for one job is also split into unit shards: each shard job compiles a part of
its units (`--only CELL --unit-shard I/N`) and hands the objects on; the job that holds the
cell takes them in and links. The plan decides how many shards a cell gets and says so in the
shard jobs it prints, so the machines that run them need not decide again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from .. import defaults
from ..errors import ConfigError
from ..values.versions import compact, major_minor
from .model import Cell, Plan

__all__ = ["Job", "UnitShard", "image_group", "parse_shard", "plan_jobs", "select_job",
           "select_shard", "unit_shards"]


@dataclass(frozen=True)
class Job:
    id: str  # cu130-x86_64-1
    image: str  # the builder image group: cu130-x86_64, or noarch
    cuda: str | None
    platform: str
    cells: tuple[str, ...]
    skipped: tuple[str, ...]
    builds_on: str = ""  # the platform of the machine that builds them, where not theirs

    def summary(self) -> dict[str, Any]:
        """One entry of a GitHub Actions matrix."""
        return {"job": self.id, "cuda": self.cuda or "none", "platform": self.platform,
                "runs-on": defaults.RUNS_ON.get(self.builds_on or self.platform,
                                                defaults.RUNS_ON["x86_64"]),
                # cross-compiled and CPU cells build outside the builder images
                "runner": "local" if self.builds_on or self.image.startswith("cpu-")
                else "docker",
                "cross": bool(self.builds_on),
                "cells": len(self.cells)}


@dataclass(frozen=True)
class UnitShard:
    """One CI job that compiles part of a cell's units for the job that links the cell."""

    job: Job  # the job that holds the cell
    cell: Cell
    index: int
    count: int

    def summary(self) -> dict[str, Any]:
        shard = f"{self.index}/{self.count}"
        job = self.job.summary()
        return {"job": self.job.id, "cell": self.cell.id, "shard": shard,
                "artifact": f"objects-{self.job.id}-{self.cell.key}-{self.index}of{self.count}",
                "cuda": self.job.cuda or "none", "platform": self.job.platform,
                "runs-on": job["runs-on"], "runner": job["runner"], "cross": job["cross"]}


def unit_shards(plan: Plan, jobs: list[Job], counts: dict[str, int]) -> list[UnitShard]:
    """The shard jobs of the cells `counts` splits (cell id -> number of shards, above 1)."""
    cells = {cell.id: cell for cell in plan.cells}
    shards = []
    for job in jobs:
        for cell_id in job.cells:
            count = counts.get(cell_id, 1)
            if count > 1:
                shards += [UnitShard(job, cells[cell_id], index, count)
                           for index in range(1, count + 1)]
    return shards


def image_group(cell: Cell) -> str:
    if cell.cuda is None:
        return f"cpu-{cell.platform}" if cell.compiled else "noarch"
    group = f"cu{compact(major_minor(cell.cuda.version))}-{cell.platform}"
    return f"{group}-cross" if cell.cross else group


def _ordered(plan: Plan) -> list[Cell]:
    """The plan's cells by builder image, then id: the order jobs and shards are cut from."""
    return sorted(plan.cells, key=lambda c: (image_group(c), c.id))


def plan_jobs(plan: Plan, max_cells: int = defaults.MAX_CELLS_PER_JOB) -> list[Job]:
    groups: dict[str, list[Cell]] = {}
    for cell in _ordered(plan):
        groups.setdefault(image_group(cell), []).append(cell)
    jobs = []
    for group, cells in groups.items():
        count = -(-len(cells) // max_cells)
        for number, chunk in enumerate(_split(cells, count), start=1):
            first = chunk[0]
            jobs.append(Job(f"{group}-{number}", group,
                            str(major_minor(first.cuda.version)) if first.cuda else None,
                            first.platform, tuple(c.id for c in chunk), (),
                            defaults.CROSS_BUILT[first.platform] if first.cross else ""))
    skipped = tuple(sorted(s.id for s in plan.skipped))
    if jobs:
        head = jobs[0]
        jobs[0] = replace(head, skipped=skipped)
    elif skipped:
        jobs.append(Job("skipped-1", "none", None, "any", (), skipped))
    return jobs


def select_job(plan: Plan, job_id: str, max_cells: int = defaults.MAX_CELLS_PER_JOB) -> Plan:
    jobs = plan_jobs(plan, max_cells)
    for job in jobs:
        if job.id == job_id:
            return plan.select(set(job.cells) | set(job.skipped))
    known = ", ".join(job.id for job in jobs) or "none"
    raise ConfigError(f"no job '{job_id}' in this plan (jobs: {known})", key="--job")


MAX_SHARDS = 10_000  # more jobs than any CI fan-out runs


def parse_shard(text: str) -> tuple[int, int]:
    """'2/4' -> (2, 4), refusing anything else."""
    match = re.fullmatch(r"(\d{1,6})/(\d{1,6})", text.strip())
    if not match or not 1 <= int(match[1]) <= int(match[2]) <= MAX_SHARDS:
        raise ConfigError(f"'{text}' is not a shard I/N with 1 <= I <= N <= {MAX_SHARDS} "
                          "(e.g. 1/4)", key="--shard")
    return int(match[1]), int(match[2])


def select_shard(plan: Plan, index: int, count: int) -> Plan:
    """Shard `index` of `count` (from 1): a contiguous run of the ordered cells, the shards'
    sizes differing by one at most."""
    chosen = {cell.id for cell in _split(_ordered(plan), count)[index - 1]}
    if index == 1:
        chosen |= {skipped.id for skipped in plan.skipped}
    return plan.select(chosen)


def _split(items: list[Cell], count: int) -> list[list[Cell]]:
    size, extra = divmod(len(items), count)
    parts: list[list[Cell]] = []
    start = 0
    for number in range(count):
        end = start + size + (1 if number < extra else 0)
        parts.append(items[start:end])
        start = end
    return parts
