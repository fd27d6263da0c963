"""Build a cuTile-Python project for one cell: its pure-Python wheel, made by `build` through
the project's own backend, with its declared kernels compiled ahead of time.

The project's build environment (pep517.py's, beside the cell's torch) also holds cuda-tile;
its assembler, tileiras, with the CUDA 13 compilers it drives, comes from a folder of its own
(toolchain/cutile.py: torch's pinned CUDA wheels and the assembler's cannot share an
environment), so no toolkit of the machine takes part and no GPU is needed.
data/cutile/export.py then runs in that environment over the unpacked wheel: it imports the
project, compiles every declared signature for every SM of the cell into cubins and Tile IR
bytecode under the package's _kwf_cutile folder, and copies in the loader
(data/cutile/runtime.py), which the package's __init__.py imports first. The wheel keeps its
py3-none tag for the cell's platform (one wheel serves every CPython cuda-tile ships for), gets
the cell's label and torch pin, and requires the cuda-tile release it was compiled with (its
minor series: the calling convention the cubins follow is cuda-tile's).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.version import Version as PackagingVersion

from ....errors import BuildError, CommandFailed
from ....outputs.files import read_small_json
from ....toolchain.cutile import assembler_facts, provide_assembler
from ....wheel.assemble import write_wheel
from ....wheel.read import PROVENANCE_FILE
from ...job import Built, Job, cell_torch, stage_source, unpack_wheel
from ...records import provenance_file, toolchain_facts
from ...sandbox import confined_command, confined_environment, provide_bwrap
from ..pep517.build import build_requirements, import_first, provide_build_env, reissued_metadata

__all__ = ["LOADER_MODULE", "build_cutile", "cutile_build_requirements"]

LOADER_MODULE = "_kernel_wheel_factory_cutile"
_HERE = Path(__file__).resolve().parents[3] / "data" / "cutile"
_REPORT_LIMIT = 64 << 20  # bytes: the export names each cubin it wrote


def cutile_build_requirements(root: Path, requirement: str) -> list[str]:
    """The project's build requirements with cuda-tile (its assembler lives apart)."""
    wanted = Requirement(requirement)
    wanted.extras = set(wanted.extras) - {"tileiras"}
    return [*build_requirements(root), str(wanted)]


def build_cutile(job: Job) -> Built:
    cell, work, log, options = job.cell, job.work, job.log, job.options
    spec = cell.spec
    assert spec.cutile_requirement is not None and cell.torch is not None
    src = work / "src"
    stage_source(spec.root, src)
    job.progress("torch environment")
    torch = cell_torch(cell, job.cache, options, log, job.prepared)
    job.progress("build environment")
    python = provide_build_env(torch, cutile_build_requirements(src, spec.cutile_requirement),
                               job.cache, log, options.offline, create=not job.prepared)
    assembler = provide_assembler(spec.cutile_requirement, job.cache, log, options.offline,
                                  create=not job.prepared)
    variables = {**dict(cell.env), "SOURCE_DATE_EPOCH": str(options.epoch(cell)),
                 "PYTHONNOUSERSITE": "1", "PIP_NO_INDEX": "1", "CUDA_TILE_CACHE_DIR": "off"}

    job.progress("building (build)")
    built_dir = work / "built"
    log.step("building with `build` (no isolation)")
    _run(job, [str(python), "-m", "build", "--wheel", "--no-isolation", "--outdir",
               str(built_dir), str(src)], src, variables, "building the project")
    wheels = sorted(built_dir.glob("*.whl"))
    if len(wheels) != 1:
        raise BuildError(f"the project's build made {len(wheels)} wheels, expected 1")
    content = work / "final"
    extra = unpack_wheel(wheels[0], content)

    job.progress("compiling (cuTile)")
    exported = _export(job, python, assembler, content, variables)

    job.progress("packaging")
    release = PackagingVersion(exported["cuda_tile"])
    pinned = f"cuda-tile>={release.base_version},<{release.major}.{release.minor + 1}"
    metadata = reissued_metadata(cell, wheels[0].name, extra, {"cuda-tile": pinned})
    facts = toolchain_facts(torch=torch.torch_version)
    facts["cuda_tile"] = exported["cuda_tile"]
    facts["tileiras"] = exported["assembler"]
    extra[PROVENANCE_FILE] = provenance_file(cell, options, facts, content)
    tag = f"py3-none-{_platform_tag(cell.platform)}"
    wheel = write_wheel(content, work / "dist", metadata, tag, purelib=True,
                        epoch=options.epoch(cell), extra_dist_info=extra)
    return Built(wheel, units=exported["cubins"], compiled=exported["cubins"])


def _export(job: Job, python: Path, assembler: Path, content: Path,
            variables: dict[str, str]) -> dict[str, Any]:
    """The declared kernels of the unpacked wheel in `content` compiled ahead of time by
    data/cutile/export.py in the build environment, the loader put first in each package
    that has them; what export.py says it did."""
    spec, work, log = job.cell.spec, job.work, job.log
    sms = [f"sm_{cap.arch}" for cap in job.cell.sms]
    request = work / "cutile-request.json"
    result = work / "cutile-result.json"
    version, supported = assembler_facts(assembler)
    request.write_text(json.dumps({
        "content": str(content), "loader": str(_HERE / "runtime.py"), "module": LOADER_MODULE,
        "sms": sms, "assembler": version, "supported": supported,
        "kernels": [kernel.to_json() for kernel in spec.cutile],
        "result": str(result)}, indent=1) + "\n")
    signatures = sum(len(kernel.signatures) for kernel in spec.cutile)
    log.step(f"compiling {len(spec.cutile)} cuTile kernels ({signatures} signatures) ahead of "
             f"time for {' '.join(sms)}")
    # cuTile takes the first tileiras on PATH (the assembler's, beside its own ptxas)
    exporting = {**variables, "PYTHONDONTWRITEBYTECODE": "1",
                 "PATH": os.pathsep.join([str(assembler), os.environ.get("PATH", "")])}
    _run(job, [str(python), str(_HERE / "export.py"), str(request)], content, exporting,
         "compiling the cuTile kernels")
    # written beside the kernel's code, which could put anything there: read bounded
    exported = read_small_json(result, _REPORT_LIMIT)
    shape = {"packages": list, "cubins": int, "assembler": str, "cuda_tile": str}
    if not isinstance(exported, dict) or not all(isinstance(exported.get(key), kind)
                                                 for key, kind in shape.items()) or \
            not all(isinstance(package, str) and package.isidentifier()
                    for package in exported["packages"]):
        raise BuildError("cuTile's export left no report the factory can read (a JSON file "
                         f"of at most {_REPORT_LIMIT >> 20} MiB)")
    log.write(f"   {exported['cubins']} cubins with {exported['assembler']} (cuda-tile "
              f"{exported['cuda_tile']})")
    for package in exported["packages"]:
        # before anything else, so that no kernel launches before the loader serves it
        import_first(content / package / "__init__.py", LOADER_MODULE)
    return exported


def _platform_tag(platform: str) -> str:
    """cuda-tile's own wheels are manylinux2014 (glibc 2.17) and so is what needs them."""
    return f"manylinux_2_17_{platform}.manylinux2014_{platform}"


def _run(job: Job, argv: list[str], cwd: Path, variables: dict[str, str], what: str) -> None:
    env = {**os.environ, **variables}
    if not job.prepared and job.container is None:
        env = confined_environment(job.work, variables)
        if not job.options.unconfined:
            provide_bwrap(job.cache, job.log, job.options.machine)
            argv = confined_command(argv, job.work, cwd)
    for name in ("CUDA_HOME", "CUDA_PATH"):  # the assembler's own compilers, not a toolkit's
        env.pop(name, None)
    try:
        job.compiling.pool.run(argv, cwd, job.log, what, env=env)
    except CommandFailed as failure:
        refused = [line[len("error: "):] for line in failure.output.splitlines()
                   if line.startswith("error: ")]
        if refused:
            raise BuildError(refused[-1]) from None
        raise
