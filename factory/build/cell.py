"""Build one cell into one wheel: stage the source, compile, link, package, repair.

Runs wherever a runner puts it (on the host, or inside a builder container for the docker
runner); it reads only the cell, the cache and the build options, and leaves the wheel in
`staging`. The gates judge it afterwards, once, on the host (checks.py).

A cell's project is a kernel-builder repo (build.toml, csrc/, torch-ext/); `PROJECT_BUILDERS`
is where another kind of project (a PEP 517 CUDA extension) plugs in.

The build happens in a fixed folder (<build root>/<cell key>) and every file of the wheel is
dated with the source's time, so building the same cell again gives the same bytes.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import time
import zipfile
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path

from ..cache import exclusive
from ..compile.commands import CompileJob, compile_jobs, link_command
from ..compile.deps import unprovided
from ..compile.generated import (
    REGISTRATION_HEADER,
    import_guard,
    noarch_ops_module,
    ops_module,
)
from ..plan.cells import Cell
from ..process import Log, run
from ..sources.tree import IGNORED_DIRS
from ..toolchain import Toolchain, cxx_standard, host_compiler
from ..toolchain.cuda import provide_cuda
from ..toolchain.torch import provide_torch
from ..versions import major_minor
from ..wheel.assemble import CoreMetadata, compressed_tag, write_wheel
from ..wheel.read import PROVENANCE_FILE
from ..wheel.repair import repair
from .options import BuildOptions
from .records import kernel_metadata, provenance_record, toolchain_facts

__all__ = ["PROJECT_BUILDERS", "Progress", "build_cell"]

Progress = Callable[[str], None]
PYTHON_FILES = ("py", "pyi")


def build_cell(cell: Cell, cache: Path, options: BuildOptions, staging: Path, log: Log,
               threads: int, progress: Progress, prepared: bool = False) -> Path:
    """Build the cell's wheel and return its path inside `staging`. With `prepared`, the
    toolkit and torch environment must be in the cache already, which is only read."""
    work = options.build_root / cell.key
    with exclusive(work):
        if work.exists():
            shutil.rmtree(work)
        wheel = PROJECT_BUILDERS["kernel-builder"](cell, cache, options, work, log, threads,
                                                   progress, prepared)
        staging.mkdir(parents=True, exist_ok=True)
        staged = staging / wheel.name
        shutil.copyfile(wheel, staged)
    return staged


def _kernel_builder(cell: Cell, cache: Path, options: BuildOptions, work: Path, log: Log,
                    threads: int, progress: Progress, prepared: bool) -> Path:
    """A kernel-builder repo: its Python package from torch-ext/, its sources compiled into
    one abi3 shared object (none for a [torch-noarch] kernel)."""
    src = work / "src"
    _stage_source(cell.spec.root, src)
    package = work / "pkg" / cell.spec.python_name
    _copy_package(cell, src, package)
    if cell.label is None:
        (package / "_ops.py").write_text(noarch_ops_module(cell.ops_namespace))
        return _final_wheel(cell, options, work / "pkg", "py3-none-any", toolchain_facts(),
                            work / "dist")
    return _build_extension(cell, cache, options, work, src, package, log, threads, progress,
                            prepared)


PROJECT_BUILDERS: dict[str, Callable[[Cell, Path, BuildOptions, Path, Log, int, Progress, bool],
                                     Path]] = {"kernel-builder": _kernel_builder}


def _build_extension(cell: Cell, cache: Path, options: BuildOptions, work: Path, src: Path,
                     package: Path, log: Log, threads: int, progress: Progress,
                     prepared: bool) -> Path:
    assert cell.cuda is not None and cell.torch is not None  # a compiled cell has both
    progress("CUDA toolkit")
    toolkit = provide_cuda(cell.cuda.version, cell.cuda.home, cache, log)
    progress("torch environment")
    env = provide_torch(cell.torch, cell.cuda.version, cell.cuda.torch_index, cache, log,
                        create=not prepared)
    log.step(f"toolchain: nvcc {toolkit.version} ({toolkit.origin}, {toolkit.home}), "
             f"torch {env.torch_version} ({env.root})")
    toolchain = Toolchain(toolkit, env, host_compiler(), cxx_standard(cell.torch))
    for unit in cell.units:
        missing = unprovided(unit.depends)
        if missing:
            log.write(f"note: {unit.source} depends on {', '.join(missing)}, which the factory "
                      "does not provide; it compiles with the include folders build.toml names")
    _write_generated(cell, src, package)

    jobs = compile_jobs(cell, toolchain, src, work / "obj", threads)
    for job in jobs:
        job.object.parent.mkdir(parents=True, exist_ok=True)
    _compile_all(jobs, log, threads, progress)

    progress("linking")
    shared_object = package / f"{cell.ops_namespace}.abi3.so"
    run(link_command([job.object for job in jobs], shared_object, toolchain), log, cwd=work,
        what="linking")

    progress("auditwheel")
    draft = write_wheel(work / "pkg", work / "draft", _metadata(cell),
                        f"cp39-abi3-linux_{cell.platform}", purelib=False,
                        epoch=options.epoch(cell))
    log.step("auditwheel repair")
    repaired = repair(draft, work / "wheelhouse", log)
    content = work / "final"
    _unpack_package(repaired, content)
    progress("packaging")
    facts = toolchain_facts(toolchain.cxx, f"{toolkit.version} ({toolkit.origin})",
                            env.torch_version)
    return _final_wheel(cell, options, content, compressed_tag(repaired.name), facts,
                        work / "dist")


def _unpack_package(wheel: Path, target: Path) -> None:
    """The repaired wheel's files without its .dist-info: the wheel is written again, by the
    factory's own deterministic writer."""
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            top = info.filename.split("/", 1)[0]
            if info.is_dir() or top.endswith(".dist-info"):
                continue
            path = target / info.filename
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(archive.read(info))
            if (info.external_attr >> 16) & 0o111:
                path.chmod(0o755)


def _final_wheel(cell: Cell, options: BuildOptions, content: Path, tag: str,
                 facts: dict[str, str], dist: Path) -> Path:
    """The published form: the package with its metadata.json, the wheel with provenance."""
    package = content / cell.spec.python_name
    (package / "metadata.json").write_bytes(kernel_metadata(cell, package))
    record = provenance_record(cell, options, facts)
    provenance = (json.dumps(record, indent=2, sort_keys=True) + "\n").encode()
    return write_wheel(content, dist, _metadata(cell), tag, purelib=cell.label is None,
                       epoch=options.epoch(cell), extra_dist_info={PROVENANCE_FILE: provenance})


def _stage_source(root: Path, target: Path) -> None:
    """A private copy of the kernel repo to build in: the user's tree is never written."""
    shutil.copytree(root, target, symlinks=True,
                    ignore=shutil.ignore_patterns(*IGNORED_DIRS, "*.pyc"))
    # Fetched trees are read-only; the generated files replace committed copies in this one.
    for folder, _, files in os.walk(target):
        for name in files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                os.chmod(path, os.stat(path).st_mode | stat.S_IWUSR)


def _copy_package(cell: Cell, src: Path, package: Path) -> None:
    """The Python package from torch-ext/<name>: its .py/.pyi files and the data files the
    build.toml's pyext names. A committed _ops.py is left behind; the generated one wins."""
    section = cell.spec.torch or cell.spec.noarch
    extensions = set(PYTHON_FILES) | set(section.pyext if section else ())
    origin = src / "torch-ext" / cell.spec.python_name
    for path in sorted(origin.rglob("*")):
        relative = path.relative_to(origin)
        if not path.is_file() or "__pycache__" in relative.parts:
            continue
        if relative.as_posix() == "_ops.py" or path.suffix.lstrip(".") not in extensions:
            continue
        destination = package / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, destination)


def _write_generated(cell: Cell, src: Path, package: Path) -> None:
    """registration.h beside the bindings (over any committed copy) and the package's _ops.py."""
    assert cell.cuda is not None and cell.torch is not None  # a compiled cell has both
    folders = {src / "torch-ext"}
    bindings = cell.spec.torch.src if cell.spec.torch else ()
    folders |= {(src / source).parent for source in bindings}
    for folder in folders:
        (folder / "registration.h").write_text(REGISTRATION_HEADER)
    guard = import_guard(cell.spec.name, cell.wheel_version, str(major_minor(cell.torch)),
                         str(major_minor(cell.cuda.version)),
                         cell.label_template or cell.label or "")
    (package / "_ops.py").write_text(ops_module(cell.ops_namespace, guard))


def _compile_all(jobs: list[CompileJob], log: Log, threads: int, progress: Progress) -> None:
    done = 0
    progress(f"compiling 0/{len(jobs)}")
    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        pending: set[Future[None]] = {pool.submit(_compile_one, job, log) for job in jobs}
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                error = future.exception()
                if error is not None:
                    for other in pending:
                        other.cancel()
                    raise error
                done += 1
                progress(f"compiling {done}/{len(jobs)}")


def _compile_one(job: CompileJob, log: Log) -> None:
    started = time.monotonic()
    run(job.argv, log, cwd=job.cwd, what=f"compiling {job.source}")
    log.write(f"   {job.source}: {time.monotonic() - started:.1f} s")


def _metadata(cell: Cell) -> CoreMetadata:
    spec = cell.spec
    readme = spec.root / "README.md"
    if cell.torch is None or cell.cuda is None:
        summary = f"{spec.name} kernel (pure Python, any torch), built by kernel-wheel-factory"
        requires: tuple[str, ...] = ("torch", *spec.requirements(cuda=False))
    else:
        sms = " ".join(str(sm.base) for sm in cell.sms)
        summary = (f"{spec.name} kernel for torch {major_minor(cell.torch)} and CUDA "
                   f"{cell.cuda.version} (SM {sms}), built by kernel-wheel-factory")
        requires = (f"torch=={major_minor(cell.torch)}.*", *spec.requirements(cuda=True))
    return CoreMetadata(
        name=spec.name, version=cell.wheel_version, summary=summary, requires_python=">=3.9",
        requires=tuple(dict.fromkeys(requires)), license=spec.license,
        readme=readme.read_text(encoding="utf-8", errors="replace") if readme.is_file() else None,
    )
