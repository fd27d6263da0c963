"""The factory's side of a builder container, run by the docker runner as
`python -m factory.build.runners.docker.inside prepare|build` with a JSON job on stdin.

    prepare   make the torch environment a cell needs, in the mounted cache (network on)
    build     build one cell (network off, the cache mounted read-only, a non-root user)

The cell comes as its record (plan/codec.py), read against the copy of the kernel in the
container. The log goes to stdout. Lines that start with CONTROL carry JSON for the runner
outside: progress steps, then the result or the error.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ....config.buildtoml import read_build_toml
from ....errors import FactoryError
from ....plan.codec import cell_from_record
from ....process import Log
from ....sources.depends import Dependency
from ....sources.tree import SourceTree
from ....toolchain.torch import provide_torch
from ....versions import parse_release
from ...cell import build_cell
from ...options import BuildOptions

__all__ = ["CONTROL", "main"]

CONTROL = "::kernel-wheel-factory:: "


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in ("prepare", "build"):
        sys.stderr.write("usage: python -m factory.build.runners.docker.inside prepare|build "
                         "< job.json\n")
        return 2
    job = json.loads(sys.stdin.read())
    log = Log(sys.stdout)

    def say(**message: Any) -> None:
        log.write(CONTROL + json.dumps(message))

    try:
        if argv[0] == "prepare":
            env = provide_torch(parse_release(job["torch"]), parse_release(job["cuda"]),
                                job["torch_index"], Path(job["cache"]), log)
            say(result=env.torch_version)
        else:
            root = Path(job["kernel"])
            copied = {Path(folder).name: (Path(folder), count)
                      for folder, count in job.get("depends", {}).items()}

            def dependency(item: dict[str, Any]) -> Dependency:
                folder, count = copied[item["name"]]
                return Dependency.from_record(item, tuple(folder / str(n) for n in range(count)))

            cell = cell_from_record(job["cell"], read_build_toml(root),
                                    SourceTree.from_json(job["source"], root), job["version"],
                                    root / "build.toml", cuda_home=Path(job["cuda_home"]),
                                    dependency=dependency)
            options = BuildOptions(Path(job["build_root"]), job["source_date_epoch"],
                                   job["builder"])
            wheel = build_cell(cell, Path(job["cache"]), options, Path(job["out"]), log,
                               job["threads"], lambda step: say(progress=step), prepared=True)
            say(result=wheel.name)
    except FactoryError as exc:
        say(error=str(exc))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
