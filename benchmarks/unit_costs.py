"""How far the factory's unit cost estimates are from what builds measured, per cell.

    .venv/bin/python benchmarks/unit_costs.py MATRIX COSTS_DIR [--cache DIR]

COSTS_DIR is a cost book folder (`costs/` beside an object cache: one <kernel>.json per kernel,
written by `factory build`), e.g. one carried back from a build on a bigger machine; MATRIX
names the same kernels (the plan's cell keys must match the book's). For each cell, over the
units the book measured:

    measured    the core-seconds the book holds
    size        the estimate a build starts from when nothing was measured (size and archs)
    similar     each unit estimated with its own source left out of the book: the mean of the
                measured units whose names are most like it, else the size estimate

and each estimate over the measured figure. A ratio within 1/1.5 .. 1.5 is the goal.

benchmarks/costs/ holds books measured on the GPU machines (nvcc 13.0, torch 2.11, an sm_90
cell, kernels-community 40d4194 unmodified, one thread per unit): sage-attention (all 13 units,
16 cores), flash-attn2 (all 75 units, 32 cores) and natten (all 159 units, its Blackwell
section's among them, 32 cores). A matrix
naming those kernels' folders with `torch: ["2.11"]` and `cuda: {"13.0": {sms: ["9.0"]}}`
prints their rows; the same folder serves as a matrix's `costs:` book.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from factory.compile.costbook import CostBook  # noqa: E402
from factory.pipeline.load import plan_matrix  # noqa: E402
from factory.plan.costs import cost_key, estimated_seconds  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("matrix", type=Path)
    parser.add_argument("costs", type=Path)
    parser.add_argument("--cache", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        plan = plan_matrix(args.matrix, args.cache or Path(scratch), lambda _: None)
    book = CostBook(args.costs)
    print(f"{'cell':48} {'units':>9} {'measured':>9} {'size':>15} {'similar':>15}")
    for cell in plan.cells:
        costs = book.read(cell.spec.name)
        units = [unit for unit in cell.units if unit.compiled]
        measured = [unit for unit in units if cost_key(cell, unit) in costs]
        if not measured:
            continue
        total = sum(costs[cost_key(cell, unit)].seconds for unit in measured)
        size = sum(estimated_seconds(cell, unit) for unit in measured)
        similar = sum(estimated_seconds(cell, unit, {key: cost for key, cost in costs.items()
                                                     if not key.endswith(f"/{unit.source}")})
                      for unit in measured)
        print(f"{cell.id:48} {len(measured):>4}/{len(units):<4} {total:>8.0f}s "
              f"{size:>8.0f}s {size / total:>5.2f}x {similar:>8.0f}s {similar / total:>5.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
