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
from dataclasses import dataclass
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
from ..config.torches import InstalledTorch, ProbeError, probe_interpreter
from ..errors import BuildError
from ..plan.cells import Cell
from ..process import Log, first_output_line, run
from ..sources.tree import IGNORED_DIRS
from ..toolchain import CommandPrefix, Toolchain, cxx_standard, host_compiler
from ..toolchain.cuda import image_toolkit, provide_cuda
from ..toolchain.torch import installed_env, provide_torch
from ..versions import major_minor
from ..wheel.assemble import CoreMetadata, compressed_tag, write_wheel
from ..wheel.read import PROVENANCE_FILE
from ..wheel.repair import repair
from .options import BuildOptions
from .records import kernel_metadata, provenance_record, toolchain_facts

__all__ = ["PROJECT_BUILDERS", "Container", "Job", "Progress", "build_cell", "cell_toolchain"]

Progress = Callable[[str], None]
PYTHON_FILES = ("py", "pyi")


@dataclass(frozen=True)
class Container:
    """A running container a cell compiles in (its torch and toolkit live there): the
    `docker exec` command that reaches it, and the user its commands run as, to whom the
    cell's build folder is handed when the factory runs as root."""

    exec_prefix: tuple[str, ...]  # docker exec [options] NAME
    owner: tuple[int, int] | None = None

    def hand_over(self, folder: Path) -> None:
        if self.owner is None:
            return
        for path in [folder, *folder.rglob("*")]:
            os.chown(path, *self.owner, follow_symlinks=False)


@dataclass(frozen=True)
class Job:
    """Where and how one cell is built: what every project builder is given."""

    cell: Cell
    cache: Path
    options: BuildOptions
    work: Path  # the cell's fixed build folder
    log: Log
    threads: int
    progress: Progress
    prepared: bool  # the toolkit and torch environment are in the (read-only) cache already
    container: Container | None


def build_cell(cell: Cell, cache: Path, options: BuildOptions, staging: Path, log: Log,
               threads: int, progress: Progress, prepared: bool = False,
               container: Container | None = None) -> Path:
    """Build the cell's wheel and return its path inside `staging`. With `prepared`, the
    toolkit and torch environment must be in the cache already, which is only read. A cell
    whose torch lives in an image compiles in `container`, a container of that image that
    sees the cell's build folder at the same path."""
    work = options.build_root / cell.key
    with exclusive(work):
        if work.exists():
            shutil.rmtree(work)
        wheel = PROJECT_BUILDERS["kernel-builder"](
            Job(cell, cache, options, work, log, threads, progress, prepared, container))
        staging.mkdir(parents=True, exist_ok=True)
        staged = staging / wheel.name
        shutil.copyfile(wheel, staged)
    return staged


def _kernel_builder(job: Job) -> Path:
    """A kernel-builder repo: its Python package from torch-ext/, its sources compiled into
    one abi3 shared object (none for a [torch-noarch] kernel)."""
    cell, work = job.cell, job.work
    src = work / "src"
    _stage_source(cell.spec.root, src)
    package = work / "pkg" / cell.spec.python_name
    _copy_package(cell, src, package)
    if cell.label is None:
        (package / "_ops.py").write_text(noarch_ops_module(cell.ops_namespace))
        return _final_wheel(cell, job.options, work / "pkg", "py3-none-any", toolchain_facts(),
                            work / "dist")
    return _build_extension(job, src, package)


PROJECT_BUILDERS: dict[str, Callable[[Job], Path]] = {"kernel-builder": _kernel_builder}


def cell_toolchain(job: Job) -> Toolchain:
    """The toolkit, torch and host compiler of a compiled cell, made or found."""
    cell, log = job.cell, job.log
    assert cell.cuda is not None and cell.torch is not None  # a compiled cell has both
    installed = cell.installed
    job.progress("CUDA toolkit")
    if installed is not None and installed.image is not None:
        if job.container is None:
            raise BuildError(f"{installed.describe()}: this torch lives in an image, which only "
                             "the docker runner can build in")
        toolkit = image_toolkit(installed)
        compilers: dict[str, str] | None = dict(installed.compilers)
    else:
        toolkit = provide_cuda(cell.cuda.version, cell.cuda.home, job.cache, log,
                               job.options.offline)
        compilers = None
    job.progress("torch environment")
    if installed is not None:
        if installed.image is None:
            _check_unchanged(installed)
        env = installed_env(installed)
    else:
        env = provide_torch(cell.torch, cell.cuda.version, cell.cuda.torch_index, job.cache, log,
                            create=not job.prepared, offline=job.options.offline)
    cxx = host_compiler(toolkit.version, compilers)
    where = f", in a container of {installed.image}" if installed and installed.image else ""
    log.step(f"toolchain: {toolkit.describe()}, torch {env.torch_version} ({env.root}), "
             f"{cxx}{where}")
    for dependency in cell.depends:
        log.step(f"C++ dependency: {dependency.describe()}")
    runs_in = CommandPrefix(job.container.exec_prefix if job.container else ())
    return Toolchain(toolkit, env, cxx, cxx_standard(cell.torch), runs_in, cell.depends)


def _check_unchanged(installed: InstalledTorch) -> None:
    """The interpreter still has the torch the plan read (it may have changed since)."""
    try:
        now = probe_interpreter(Path(installed.python))
    except ProbeError as exc:
        raise BuildError(str(exc)) from None
    if now.version != installed.version or now.site_packages != installed.site_packages:
        raise BuildError(f"{installed.python} had torch {installed.version} when the build was "
                         f"planned and has {now.version} in {now.site_packages} now")


def _build_extension(job: Job, src: Path, package: Path) -> Path:
    cell, log, work, options = job.cell, job.log, job.work, job.options
    toolchain = cell_toolchain(job)
    for unit in cell.units:
        missing = unprovided(unit.depends)
        if missing:
            log.write(f"note: {unit.source} depends on {', '.join(missing)}, which the factory "
                      "does not provide; it compiles with the include folders build.toml names")
    _write_generated(cell, src, package)

    jobs = compile_jobs(cell, toolchain, src, work / "obj", job.threads)
    for compile_job in jobs:
        compile_job.object.parent.mkdir(parents=True, exist_ok=True)
    if job.container is not None:
        job.container.hand_over(work)
    _compile_all(jobs, toolchain.runs_in, log, job.threads, job.progress)

    job.progress("linking")
    shared_object = package / f"{cell.ops_namespace}.abi3.so"
    argv, cwd = toolchain.runs_in.argv(link_command([j.object for j in jobs], shared_object,
                                                    toolchain), work)
    run(argv, log, cwd=cwd, what="linking")

    job.progress("auditwheel")
    draft = write_wheel(work / "pkg", work / "draft", _metadata(cell),
                        f"cp39-abi3-linux_{cell.platform}", purelib=False,
                        epoch=options.epoch(cell))
    log.step("auditwheel repair")
    repaired = repair(draft, work / "wheelhouse", log)
    content = work / "final"
    _unpack_package(repaired, content)
    job.progress("packaging")

    def ask(argv: list[str]) -> str:
        command, _ = toolchain.runs_in.argv(argv, work)
        return first_output_line(command)

    facts = toolchain_facts(toolchain.cxx, f"{toolchain.cuda.version} ({toolchain.cuda.origin})",
                            toolchain.torch.torch_version, ask)
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
                         cell.label_template or cell.label or "",
                         exact=cell.installed.version if cell.installed and cell.installed.exact
                         else None)
    (package / "_ops.py").write_text(ops_module(cell.ops_namespace, guard))


def _compile_all(jobs: list[CompileJob], runs_in: CommandPrefix, log: Log, threads: int,
                 progress: Progress) -> None:
    done = 0
    progress(f"compiling 0/{len(jobs)}")
    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        pending: set[Future[None]] = {pool.submit(_compile_one, job, runs_in, log)
                                      for job in jobs}
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


def _compile_one(job: CompileJob, runs_in: CommandPrefix, log: Log) -> None:
    started = time.monotonic()
    argv, cwd = runs_in.argv(job.argv, job.cwd)
    run(argv, log, cwd=cwd, what=f"compiling {job.source}")
    log.write(f"   {job.source}: {time.monotonic() - started:.1f} s")


def _metadata(cell: Cell) -> CoreMetadata:
    spec = cell.spec
    readme = spec.root / "README.md"
    if cell.torch is None or cell.cuda is None:
        summary = f"{spec.name} kernel (pure Python, any torch), built by kernel-wheel-factory"
        requires: tuple[str, ...] = ("torch", *spec.requirements(None))
    else:
        sms = " ".join(str(sm.base) for sm in cell.sms)
        summary = (f"{spec.name} kernel for torch {cell.torch_shown} and CUDA "
                   f"{cell.cuda.version} (SM {sms}), built by kernel-wheel-factory")
        requires = (f"torch{cell.torch_pin}", *spec.requirements("cuda"))
    return CoreMetadata(
        name=spec.name, version=cell.wheel_version, summary=summary, requires_python=">=3.9",
        requires=tuple(dict.fromkeys(requires)), license=spec.license,
        readme=readme.read_text(encoding="utf-8", errors="replace") if readme.is_file() else None,
    )
