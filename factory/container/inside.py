"""The factory's side of a builder container, run by the docker runner as
`python -m factory.container.inside prepare|build` with a JSON job on stdin.

    prepare   make the torch environment a cell needs, in the mounted cache (network on)
    build     build one cell (network off, the cache mounted read-only, a non-root user)

The log goes to stdout. Lines that start with CONTROL carry JSON for the runner outside:
progress steps, then the result or the error.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..cellbuild import build_cell
from ..errors import FactoryError
from ..matrix.model import CudaEntry
from ..process import Log
from ..provenance import BuildOptions
from ..replan import replan_cell
from ..source import source_from_facts
from ..toolchain.torchenv import provide_torch
from ..versions import Version

CONTROL = "::kernel-wheel-factory:: "


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in ("prepare", "build"):
        sys.stderr.write("usage: python -m factory.container.inside prepare|build < job.json\n")
        return 2
    job = json.loads(sys.stdin.read())
    log = Log(sys.stdout)

    def say(**message) -> None:
        log.write(CONTROL + json.dumps(message))

    try:
        if argv[0] == "prepare":
            cuda = CudaEntry(Version.parse(job["cuda"]), (), True, None, job["torch_index"], None)
            env = provide_torch(Version.parse(job["torch"]), cuda, Path(job["cache"]), log)
            say(result=env.torch_version)
        else:
            kernel = Path(job["kernel"])
            tree = source_from_facts(job["source"], kernel)
            cell = replan_cell(job["cell"], job["version"], tree, kernel / "build.toml",
                               cuda_home=Path(job["cuda_home"]))
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
