"""Build one cell into one wheel: stage the source, compile, link, package, repair, verify.

Runs wherever a runner puts it (on the host now, inside a container for the docker runner);
it reads only the cell and the cache, and leaves the finished wheel in `staging`.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

from .cache import exclusive
from .compile.commands import (
    Toolchain,
    compile_jobs,
    cuda_archs,
    cxx_standard,
    host_compiler,
    link_command,
)
from .compile.generated import REGISTRATION_HEADER, noarch_ops_module, ops_module
from .errors import BuildError
from .matrix.plan import Cell
from .process import Log, run
from .source import IGNORED_DIRS
from .toolchain.cuda import provide_cuda
from .toolchain.torchenv import provide_torch
from .wheel.assemble import CoreMetadata, write_wheel
from .wheel.fatbin import FatbinEntry, fatbin_entries
from .wheel.repair import repair

Progress = Callable[[str], None]
PYTHON_FILES = ("py", "pyi")


def build_cell(cell: Cell, cache: Path, staging: Path, log: Log, threads: int,
               progress: Progress) -> Path:
    """Build the cell's wheel and return its path inside `staging`."""
    work = cache / "build" / cell.key
    with exclusive(work):
        if work.exists():
            shutil.rmtree(work)
        src = work / "src"
        _stage_source(cell.spec.root, src)
        package = work / "pkg" / cell.spec.python_name
        _copy_package(cell, src, package)
        if cell.label is None:
            (package / "_ops.py").write_text(noarch_ops_module(cell.ops_namespace))
            wheel = write_wheel(work / "pkg", work / "dist", _metadata(cell), "py3-none-any",
                                purelib=True)
        else:
            wheel = _build_extension(cell, cache, work, src, package, log, threads, progress)
        staging.mkdir(parents=True, exist_ok=True)
        staged = staging / wheel.name
        shutil.copyfile(wheel, staged)
    return staged


def _build_extension(cell: Cell, cache: Path, work: Path, src: Path, package: Path, log: Log,
                     threads: int, progress: Progress) -> Path:
    progress("CUDA toolkit")
    toolkit = provide_cuda(cell.cuda, cache, log)
    progress("torch environment")
    env = provide_torch(cell.torch, cell.cuda, cache, log)
    log.step(f"toolchain: nvcc {toolkit.version} ({toolkit.origin}, {toolkit.home}), "
             f"torch {env.torch_version} ({env.root})")
    toolchain = Toolchain(toolkit, env, host_compiler(), cxx_standard(cell.torch))
    _write_generated(cell, src, package)

    jobs = compile_jobs(cell, toolchain, src, work / "obj", threads)
    for job in jobs:
        job.object.parent.mkdir(parents=True, exist_ok=True)
    _compile_all(jobs, log, threads, progress)

    progress("linking")
    shared_object = package / f"{cell.ops_namespace}.abi3.so"
    run(link_command([job.object for job in jobs], shared_object, toolchain), log, what="linking")
    _check_gpu_code(cell, shared_object, log)

    progress("packaging")
    wheel = write_wheel(work / "pkg", work / "dist", _metadata(cell),
                        f"cp39-abi3-linux_{cell.platform}", purelib=False)
    progress("auditwheel")
    log.step("auditwheel repair")
    return repair(wheel, work / "wheelhouse", log)


def _stage_source(root: Path, target: Path) -> None:
    """A private copy of the kernel repo to build in: the user's tree is never written."""
    shutil.copytree(root, target, symlinks=True,
                    ignore=shutil.ignore_patterns(*IGNORED_DIRS, "*.pyc"))


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
    folders = {src / "torch-ext"}
    folders |= {(src / source).parent for source in (cell.spec.torch.src if cell.spec.torch else ())}
    for folder in folders:
        (folder / "registration.h").write_text(REGISTRATION_HEADER)
    (package / "_ops.py").write_text(ops_module(cell.ops_namespace))


def _compile_all(jobs, log: Log, threads: int, progress: Progress) -> None:
    done = 0
    progress(f"compiling 0/{len(jobs)}")
    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        pending = {pool.submit(_compile_one, job, log) for job in jobs}
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


def _compile_one(job, log: Log) -> None:
    started = time.monotonic()
    run(job.argv, log, what=f"compiling {job.source}")
    log.write(f"   {job.source}: {time.monotonic() - started:.1f} s")


def expected_gpu_code(cell: Cell) -> set[FatbinEntry]:
    """The SASS and PTX entries the plan promises for the cell's shared object."""
    expected: set[FatbinEntry] = set()
    for cap in cuda_archs(cell):
        sm = cap.major * 10 + cap.minor
        expected.add(FatbinEntry("sass", sm, cap.variant))
        if cap.ptx:
            expected.add(FatbinEntry("ptx", sm, cap.variant))
    return expected


def _check_gpu_code(cell: Cell, shared_object: Path, log: Log) -> None:
    found = set(fatbin_entries(shared_object))
    expected = expected_gpu_code(cell)
    log.step(f"GPU code in {shared_object.name}: {' '.join(str(e) for e in sorted(found))}")
    if found != expected:
        missing = " ".join(str(e) for e in sorted(expected - found)) or "none"
        extra = " ".join(str(e) for e in sorted(found - expected)) or "none"
        raise BuildError(f"{shared_object.name} does not hold the GPU code the plan promised "
                         f"(missing: {missing}; unexpected: {extra})")


def _metadata(cell: Cell) -> CoreMetadata:
    spec = cell.spec
    readme = spec.root / "README.md"
    if cell.label is None:
        summary = f"{spec.name} kernel (pure Python, any torch), built by kernel-wheel-factory"
        requires = ("torch", *spec.python_depends)
    else:
        sms = " ".join(str(sm.base) for sm in cell.sms)
        summary = (f"{spec.name} kernel for torch {cell.torch.major_minor()} and CUDA "
                   f"{cell.cuda.version} (SM {sms}), built by kernel-wheel-factory")
        requires = (f"torch=={cell.torch.major_minor()}.*", *spec.python_depends,
                    *spec.cuda_python_depends)
    return CoreMetadata(
        name=spec.name, version=cell.wheel_version, summary=summary, requires_python=">=3.9",
        requires=tuple(dict.fromkeys(requires)), license=spec.license,
        readme=readme.read_text(encoding="utf-8", errors="replace") if readme.is_file() else None,
    )
