"""`factory plan`'s output: everything as JSON, or one line a workflow's strategy.matrix takes
(the jobs, or the unit shard jobs)."""

from __future__ import annotations

import json
from typing import Literal

from ..pipeline.plan import FanOut
from ..toolchain.standard import header_standard
from ..values.versions import Version

__all__ = ["PlanFormat", "fanout_text"]

PlanFormat = Literal["json", "github", "github-shards"]


def fanout_text(fanout: FanOut, format: PlanFormat) -> str:
    compact = (",", ":")
    jobs, shards, costs = fanout.jobs, fanout.shards, fanout.costs
    if format == "github":
        return json.dumps({"include": [
            {**job.summary(), "shards": sum(s.job == job for s in shards)} for job in jobs]},
            separators=compact)
    if format == "github-shards":
        return json.dumps({"include": [shard.summary() for shard in shards]},
                          separators=compact)
    request, plan = fanout.request, fanout.plan
    split = request.split_after is not None
    compilers = {cell.id: compiler_needed(cell.torch) for cell in plan.cells
                 if cell.torch is not None}
    return json.dumps({
        "matrix": str(request.matrix), "max_cells": request.max_cells,
        "jobs": [{**job.summary(), "cells": list(job.cells), "skipped": list(job.skipped),
                  "split": {cell: costs[cell].shards for cell in job.cells
                            if cell in costs and costs[cell].shards > 1}} for job in jobs],
        "shards": [shard.summary() for shard in shards],
        "served": {cell.id: [served.id for served in plan.serves(cell.id)]
                   for cell in plan.cells if plan.serves(cell.id)},
        "cells": {cell: {"units": cost.units, "core_seconds": round(cost.core_seconds, 1),
                         "held": sorted(cost.held.units),
                         "left": {"units": cost.left[0],
                                  "core_seconds": round(cost.left[1], 1)},
                         "shards": cost.shards, "widened": cost.widened,
                         **({"compiler": compilers[cell]} if cell in compilers else {})}
                  for cell, cost in sorted(costs.items())},
        "skipped": {skipped.id: skipped.reason for skipped in plan.skipped},
        **({"distributions": dict(plan.renamed)} if plan.renamed else {}),
        **({"estimates": {"split_after": request.split_after, "cores": request.cores,
                          "core_seconds": {cell: round(cost.core_seconds, 1)
                                           for cell, cost in sorted(costs.items())}}}
           if split else {}),
    }, indent=1)


def compiler_needed(torch: Version) -> str:
    """What the host compiler of a cell against this torch must be."""
    need = header_standard(torch)
    return f"g++ {need.gcc} or newer (torch {torch}'s headers need C++{need.name})"
