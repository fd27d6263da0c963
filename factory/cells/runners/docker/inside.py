"""The factory's side of a builder container, run by the docker runner as
`python -m factory.cells.runners.docker.inside STEP` with a JSON job on stdin.

    standard  whether the image's host compiler gives the C++ standard a torch's headers
              demand (before anything is made for a cell of that torch)
    prepare   make the torch environment a cell needs (and a PEP 517 project's build
              environment, or what its wheel needs beside torch to be imported; cuTile's
              assembler), in the mounted cache (network on)
    build     build one cell (network off, the cache mounted read-only, a non-root user;
              the object cache's part of the image's base mounted read-write)
    test_env  make the environment a kernel's tests run in (prove/tests.py: the wheel, what
              the tests need, pytest), in the mounted cache (network on; no kernel code runs)
    load      import a built wheel with its torch (prove/load.py) and
    test      run a kernel's tests in the environment test_env made: the kernel's own code,
              each in a container of its own (network off, the cache mounted read-only, a
              non-root user, no capabilities, no process of the factory's that holds a key)

The cell comes as its record (plan/codec.py), read against the copy of the kernel in the
container. The log goes to stdout. Lines that start with CONTROL carry JSON for the runner
outside: progress steps and the costs of units as they are compiled, then the result (the
wheel, the unit counts, the objects used) or the error.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ....compile.objects import ObjectCache
from ....compile.pool import Budget, CompilePool
from ....config.model import TestSelection
from ....config.project import read_project
from ....errors import BuildError, FactoryError
from ....plan.codec import cell_from_record, recorded_kind
from ....plan.costs import UnitCost
from ....prove.load import load_wheel
from ....prove.tests import TestReport, make_tests_env, run_in_tests_env
from ....sources.depends import Dependency
from ....sources.facts import read_facts
from ....sources.tree import SourceTree
from ....system.machine import read_machine
from ....system.process import Log
from ....toolchain import host_compiler
from ....toolchain.cutile import provide_assembler
from ....toolchain.standard import compiler_shortfall
from ....toolchain.torch import TorchEnv, provide_torch
from ....values.versions import parse_release
from ...builders import build_cell
from ...job import Compiling
from ...kinds import kind_of
from ...kinds.pep517.build import provide_build_env
from ...options import BuildOptions

__all__ = ["CONTROL", "main"]

CONTROL = "::kernel-wheel-factory:: "


def main(argv: list[str]) -> int:
    steps = {"standard": _standard, "prepare": _prepare, "build": _build, "load": _load,
             "test_env": _test_env, "test": _test}
    if len(argv) != 1 or argv[0] not in steps:
        sys.stderr.write("usage: python -m factory.cells.runners.docker.inside "
                         f"{'|'.join(steps)} < job.json\n")
        return 2
    job = json.loads(sys.stdin.read())
    log = Log(sys.stdout)

    def say(**message: Any) -> None:
        log.write(CONTROL + json.dumps(message))

    try:
        steps[argv[0]](job, log, say)
    except FactoryError as exc:
        say(error=str(exc))
        return 1
    return 0


def _torch(job: dict[str, Any], log: Log, create: bool = True) -> TorchEnv:
    return provide_torch(parse_release(job["torch"]), parse_release(job["cuda"]),
                         job["torch_index"], Path(job["cache"]), log,
                         python=job.get("python") or sys.executable, create=create)


def _standard(job: dict[str, Any], log: Log, say: Callable[..., None]) -> None:
    """Why the host compiler a cell of this torch and CUDA version would get here cannot
    compile against the torch's headers, or None."""
    torch = parse_release(job["torch"])
    cxx = host_compiler(parse_release(job["cuda"]), read_machine(os.environ).cxx)  # the container's
    say(result=compiler_shortfall(torch, cxx.command, cxx.origin,
                                  lambda argv: (list(argv), None)))


def _prepare(job: dict[str, Any], log: Log, say: Callable[..., None]) -> None:
    python = job.get("python") or sys.executable
    if not Path(python).is_file():
        raise BuildError(f"the builder image has no {python}: its base provides no "
                         f"such CPython (a manylinux image keeps each in /opt/python)")
    env = _torch(job, log)
    if job.get("build_requires"):
        provide_build_env(env, list(job["build_requires"]), Path(job["cache"]), log)
    if job.get("assembler"):
        provide_assembler(job["assembler"], Path(job["cache"]), log)
    say(result=env.torch_version)


def _load(job: dict[str, Any], log: Log, say: Callable[..., None]) -> None:
    env = _torch(job, log, create=False)
    python = provide_build_env(env, list(job["requires"]), Path(job["cache"]), log,
                               create=False) if job.get("requires") else env.python
    report = load_wheel(Path(job["wheel"]), list(job["modules"]), str(python),
                        Path(job["folder"]), log)
    say(result=report.to_json())


def _test_env(job: dict[str, Any], log: Log, say: Callable[..., None]) -> None:
    made = make_tests_env(Path(job["wheel"]), Path(job["tests"]), _torch(job, log),
                          Path(job["env"]), Path(job["cache"]), log,
                          selection=TestSelection.from_json(job["selection"]),
                          needs=tuple(job["needs"]),
                          wheelhouses=tuple(map(Path, job.get("wheelhouses", ()))))
    say(result={"report": made.to_json()} if isinstance(made, TestReport) else
        {"python": str(made)})


def _test(job: dict[str, Any], log: Log, say: Callable[..., None]) -> None:
    tested = run_in_tests_env(Path(job["python"]), Path(job["tests"]), job["module"],
                              Path(job["folder"]), log,
                              selection=TestSelection.from_json(job["selection"]))
    say(result=tested.to_json())


def _build(job: dict[str, Any], log: Log, say: Callable[..., None]) -> None:
    root = Path(job["kernel"])
    copied = {Path(folder).name: (Path(folder), count)
              for folder, count in job.get("depends", {}).items()}

    def dependency(item: dict[str, Any]) -> Dependency:
        folder, count = copied[item["name"]]
        return Dependency.from_record(item, tuple(folder / str(n) for n in range(count)))

    spec = read_project(root, recorded_kind(job["cell"]))
    cell = cell_from_record(job["cell"], spec, kind_of(spec),
                            SourceTree.from_json(job["source"], root), job["version"],
                            read_facts(spec), root / "build.toml",
                            cuda_home=Path(job["cuda_home"]), dependency=dependency)
    options = BuildOptions(Path(job["build_root"]), job["source_date_epoch"],
                           job["builder"], index_url=job.get("index_url"),
                           machine=read_machine(os.environ))  # the container's own
    compiling = _compiling(job, say)
    built = build_cell(cell, Path(job["cache"]), options, Path(job["out"]), log,
                       compiling, lambda step: say(progress=step), prepared=True)
    store = compiling.store
    say(result=built.wheel.name if built.wheel else None,
        units=[built.units, built.compiled, built.cached],
        used=store.used if store else {})


def _compiling(job: dict[str, Any], say: Callable[..., None]) -> Compiling:
    """The runner's share of the budget, its time left, the object cache's part mounted for
    this image's base, and the costs known; measurements go back to the runner."""
    time_left = job["time_left"]
    pool = CompilePool(Budget(*job["budget"]),
                       None if time_left is None else time.monotonic() + time_left,
                       float(job.get("grace") or 0.0))
    costs = {key: cost for key, data in job["costs"].items()
             if (cost := UnitCost.from_json(data)) is not None}
    objects = ObjectCache(Path(job["objects"]), key=bytes.fromhex(job["object_key"])) \
        if job["objects"] else None
    only = frozenset(job["only"]) if job["only"] is not None else None
    shard = job.get("shard")
    return Compiling(pool, objects, costs,
                     lambda key, cost: say(cost=[key, cost.to_json()]), only,
                     (int(shard[0]), int(shard[1])) if shard else None,
                     verify=float(job.get("verify") or 0.0), broker=job.get("broker"))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
