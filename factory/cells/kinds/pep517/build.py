"""Build a PEP 517 project (setup.py / pyproject.toml, typically torch.utils.cpp_extension's
CUDAExtension) for one cell, through the standard front end, `build`, and issue its wheel again
as the factory's own.

The project is built without isolation, in a cached environment that sees the cell's torch: a
virtual environment of the cell's CPython whose .pth file adds the torch environment's
site-packages, with `build`, setuptools, wheel, ninja, packaging and the project's other
[build-system] requirements installed (never a second torch), bounded by torch's own
requirements. A builder container makes it while its network is on and builds without one.

On this machine (the local runner) the build is confined (sandbox.py): an allow-listed
environment, the file system read-only but for its build folder, no network. The build gets
the cell's arch list (TORCH_CUDA_ARCH_LIST: SASS for every SM, PTX for the
newest), its toolkit (CUDA_HOME), host compiler (CC, CXX), the factory's share of cores and
memory (MAX_JOBS, NVCC_THREADS), the source's time (SOURCE_DATE_EPOCH) and the matrix's env:
for the kernel. A build that reaches for the network (to download a prebuilt wheel, say) fails
with a message that says so.

What `build` makes is then taken apart: auditwheel repairs it (torch's and NVIDIA's libraries
left out), its version gets the cell's label, its torch requirement the cell's pin, and the
factory writes it again with its deterministic writer and provenance.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import os
import re
import shutil
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

from .... import defaults
from ....compile.commands import compression_flags
from ....compile.objects import ObjectStore
from ....compile.pool import Finished, TimeLimitReached
from ....config.nodes import load_toml
from ....errors import BuildError, CommandFailed, ConfigError, FactoryError
from ....plan.model import Cell
from ....system.cache import exclusive
from ....system.process import Log
from ....toolchain import Toolchain
from ....toolchain.torch import TorchEnv, env_beside_torch
from ....values.units import human_size
from ....values.versions import Version
from ....wheel.assemble import GivenMetadata, compressed_tag, relabelled, write_wheel
from ....wheel.fatbin import fatbin_entries
from ....wheel.read import PROVENANCE_FILE
from ....wheel.repair import repair
from ...broker import (
    ObjectBroker,
    Tally,
    build_jobs,
    cell_broker,
    compiler_threads,
    say_tally,
    stopped,
)
from ...compilers import Wrapped, log_changes, rule_note, wrap_compilers
from ...job import (
    Built,
    Job,
    build_facts,
    cell_guard,
    cell_toolchain,
    compilers_of,
    stage_source,
    unpack_wheel,
)
from ...records import gpu_code_sizes, provenance_file
from ...sandbox import confined_command, confined_environment, provide_bwrap

__all__ = ["BUILD_TOOLS", "build_project", "build_requirements", "c_compiler", "import_first",
           "provide_build_env", "reissued_metadata"]

# What every build environment has besides the project's own requirements: the front end,
# setuptools' parts, ninja (torch's BuildExtension compiles in parallel only with it) and
# packaging (many setup.py files import it without listing it).
BUILD_TOOLS = ("build", "setuptools", "wheel", "ninja", "packaging")
_DEFAULT_REQUIRES = ("setuptools>=40.8.0", "wheel")  # PEP 518's, for a project that names none
_SIGNATURES = ("RECORD.jws", "RECORD.p7s")
_BUILD_ENV_MARKER = "factory-buildenv.json"
# What a build that reaches for the network prints when there is none (glibc's resolver,
# urllib, curl, pip).
_NETWORK_FAILURE = re.compile(
    r".*(Temporary failure in name resolution|Name or service not known|Network is unreachable"
    r"|No address associated with hostname|Could not resolve host|Failed to establish a new "
    r"connection).*")


def build_project(job: Job) -> Built:
    cell, work, log = job.cell, job.work, job.log
    assert cell.cuda is not None and cell.torch is not None  # a PEP 517 cell is compiled
    src = work / "src"
    stage_source(cell.spec.root, src)
    toolchain = cell_toolchain(job)
    job.progress("build environment")
    python = provide_build_env(toolchain.torch, build_requirements(src), job.cache, log,
                               job.options.offline, create=not job.prepared,
                               wheelhouses=job.options.wheelhouses)

    job.progress("compiling (build)")
    pool = job.compiling.pool
    built_dir = work / "built"
    pool.queue(1)
    outside = job.compiling.broker  # served by the runner, from outside this container
    store = job.compiling.store if job.container is None and not job.prepared else None
    with pool.admitted(pool.budget.share(job.compiling.cells).cores,
                       lambda threads: threads * defaults.UNIT_MEMORY["cuda"],
                       math.inf) as grant, \
            _broker(job, toolchain, store, grant.threads, src) as broker:
        # the whole project's compilers in one: it starts before any single unit of another cell
        address = broker.address if broker else outside
        shard = address is not None and job.compiling.shard is not None
        wrapped = wrap_compilers(cell, toolchain, work, python, c_compiler(toolchain.cxx),
                                 address, shard=shard)
        finished = _run_build(job, toolchain, python, src, built_dir, grant.threads, wrapped,
                              broker)
    peak = f", peak {finished.peak / 2**30:.2f} GiB" if finished.peak else ""
    log.write(f"   built in {finished.seconds:.1f} s with MAX_JOBS={grant.threads}{peak}")
    tally = broker.tally if broker else Tally()
    if broker:
        say_tally(log, tally)
    applied = log_changes(log, wrapped.changes(), "the project's compiler commands") \
        if wrapped else []
    if shard:
        log.write(f"\nthis shard's {tally.units} unit(s) are in the object cache "
                  f"({tally.foreign} other shards'); the cell is linked by the build that takes "
                  "every shard's objects")
        return tally.built(None)
    job.progress("auditwheel")
    log.step("auditwheel repair")
    repaired = repair(_the_wheel(built_dir), work / "wheelhouse", log)
    job.progress("packaging")
    wheel = _issue(job, toolchain, repaired, applied)
    return tally.built(wheel)


def _broker(job: Job, toolchain: Toolchain, store: ObjectStore | None, at_once: int,
            src: Path) -> AbstractContextManager[ObjectBroker | None]:
    """The object cache's broker for the build's compiler wrappers (`at_once` of them),
    or nothing where the cell is built without the cache."""
    if store is None:
        return nullcontext()
    return cell_broker(job.cell, store, compilers_of(toolchain, job.work,
                                                     c_compiler(toolchain.cxx)),
                       job.log, job.compiling, compiler_threads(at_once, src), at_once)


def _run_build(job: Job, toolchain: Toolchain, python: Path, src: Path, built_dir: Path,
               threads: int, wrapped: Wrapped | None, broker: ObjectBroker | None) -> Finished:
    """`build` run on the project with the cell's settings, confined on this machine."""
    log = job.log
    served = broker is not None or job.compiling.broker is not None
    jobs = build_jobs(threads, job.compiling.costs, job.cell.key) if served else threads
    variables = _variables(job, toolchain, threads, jobs, src, wrapped)
    said = "" if not served else " (compiles served by the object cache)" if jobs == threads \
        else (f" (compiles served by the object cache, {threads} at a time, the longest "
              "first as earlier builds measured them)")
    log.step("building with `build` (no isolation): " + " ".join(
        f"{name}={variables[name]}" for name in ("TORCH_CUDA_ARCH_LIST", "MAX_JOBS",
                                                 "NVCC_THREADS", "CUDA_HOME")) + said)
    command = [str(python), "-m", "build", "--wheel", "--no-isolation", "--outdir",
               str(built_dir), str(src)]
    env = {**os.environ, **variables}
    if job.container is None and not job.prepared:  # on this machine, not in a container
        env = confined_environment(job.work, variables)
        if job.options.unconfined:
            log.write("unconfined (--unconfined): the build runs with this user's rights, "
                      "files and network")
        else:
            provide_bwrap(job.cache, log, job.options.machine)
            command = confined_command(command, job.work, src)
    argv, cwd = toolchain.runs_in.argv(command, src)
    try:
        finished = job.compiling.pool.run(argv, cwd, log, "building the project",
                                          measure=not toolchain.runs_in.prefix, env=env)
    except TimeLimitReached:
        if broker is None:
            raise
        raise stopped(log, broker.tally) from None
    except CommandFailed as failure:
        if broker is not None and broker.tally.late:  # its link of stand-ins failed
            raise stopped(log, broker.tally) from None
        raise _build_failure(failure, wrapped, job.cell) from None
    if broker is not None and broker.tally.late:  # it linked stand-ins: never a wheel
        raise stopped(log, broker.tally)
    return finished


def _build_failure(failure: CommandFailed, wrapped: Wrapped | None,
                   cell: Cell) -> FactoryError:
    """Why a project's build failed, in a user's words: it reached for the network, or the
    compiler commands the rules changed (named), or what the build printed first."""
    reached = _NETWORK_FAILURE.search(failure.output)
    if reached is None:
        return rule_note(failure, wrapped.changes() if wrapped else [], cell)
    return BuildError(
        f"the project's build tried to reach the network, and builds have no network "
        f"(\"{reached[0].strip()}\"): set the variable that makes it compile from "
        "source (for many projects a FORCE_BUILD switch) under the kernel's env: in the "
        "matrix")


def _the_wheel(built_dir: Path) -> Path:
    """The one wheel a project's build made, with an extension in it."""
    wheels = sorted(built_dir.glob("*.whl"))
    if len(wheels) != 1:
        raise BuildError(f"the project's build made {len(wheels)} wheels, expected 1")
    if wheels[0].name.endswith("-none-any.whl"):
        raise BuildError(f"the project's build made a pure-Python wheel ({wheels[0].name}): it "
                         "compiled no extension; if the project compiles its CUDA code only "
                         "when asked, set the variable that asks for it under the kernel's env: "
                         "in the matrix (its setup.py names it)")
    return wheels[0]


def build_requirements(root: Path) -> list[str]:
    """What a project's build environment holds besides the cell's torch: the factory's build
    tools and the project's [build-system] requires (PEP 518's default when it names none),
    torch left out."""
    path = root / "pyproject.toml"
    requires: list[str] = list(_DEFAULT_REQUIRES)
    if path.is_file():
        document = load_toml(path)
        system = document.mapping().get("build-system") \
            if isinstance(document.value, dict) else None
        if system is not None and "requires" in system.mapping():
            requires = list(system.mapping()["requires"].str_list())
    kept = list(BUILD_TOOLS)
    for text in requires:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            raise ConfigError(f"'{text}' is not a requirement", file=path,
                              key="build-system.requires") from None
        if canonicalize_name(requirement.name) != "torch" and text not in kept:
            kept.append(text)
    return kept


def provide_build_env(torch: TorchEnv, requires: list[str], cache: Path, log: Log,
                      offline: bool = False, create: bool = True,
                      wheelhouses: tuple[Path, ...] = ()) -> Path:
    """The interpreter of a cached build environment: a virtual environment of the torch
    environment's CPython that sees its torch (a .pth file names its site-packages) and holds
    `requires` (from `wheelhouses` too: the matrix's wheelhouse: folders, which let a machine
    with no network make it). Made on first use; with `create` false it must exist (a builder
    container makes it while the network is on, and builds with the cache read-only)."""
    digest = hashlib.sha256(json.dumps([str(torch.site_packages), torch.torch_version,
                                        sorted(requires)]).encode()).hexdigest()[:16]
    root = cache / "buildenvs" / f"{torch.root.name}-{digest}"
    marker = root / _BUILD_ENV_MARKER
    if create:
        with exclusive(root):
            if not marker.is_file():
                _create_build_env(root, torch, requires, cache, log, offline, wheelhouses)
    elif not marker.is_file():
        raise BuildError(f"the build environment was not prepared ({root} is missing)")
    return root / "bin" / "python"


def _create_build_env(root: Path, torch: TorchEnv, requires: list[str], cache: Path, log: Log,
                      offline: bool, wheelhouses: tuple[Path, ...]) -> None:
    log.step(f"making the build environment {root}: torch {torch.torch_version} and "
             f"{' '.join(requires)}")
    env_beside_torch(root, torch, requires, cache, log, offline,
                     "installing the project's build requirements",
                     "a build requirement of the project installed a torch of its own; the "
                     "build must use the cell's torch", wheelhouses=wheelhouses)
    (root / _BUILD_ENV_MARKER).write_text(json.dumps({"requires": requires}) + "\n")


def _variables(job: Job, toolchain: Toolchain, threads: int, jobs: int, src: Path,
               wrapped: Wrapped | None) -> dict[str, str]:
    """The environment of the project's build: its compilers behind the wrappers of the
    cell's toolchain rules, where any is in force."""
    cell = job.cell
    assert cell.cuda is not None and toolchain.cuda is not None  # PEP 517 cells are CUDA's
    archs = " ".join(f"{cap.base}{'+PTX' if cap.ptx else ''}" for cap in cell.sms)
    home = toolchain.cuda.home
    cxx = toolchain.cxx
    compilers = {"CUDA_HOME": str(home), "CUDA_PATH": str(home), "CC": c_compiler(cxx),
                 "CXX": cxx, "PATH": os.pathsep.join([str(home / "bin"),
                                                      os.environ.get("PATH", "")])}
    if wrapped is not None:
        compilers.update(wrapped.variables, PATH=os.pathsep.join(
            filter(None, [wrapped.variables.get("PATH"), compilers["PATH"]])))
    return {
        **dict(cell.env),
        "TORCH_CUDA_ARCH_LIST": archs,
        "MAX_JOBS": str(jobs),
        "NVCC_THREADS": str(compiler_threads(threads, src)),
        **compilers,
        "SOURCE_DATE_EPOCH": str(job.options.epoch(cell)),
        # nvcc names its temporary files, and so symbols of the object, after its process
        # id unless they live beside the object: the same build must give the same bytes.
        # (and the cell's GPU code compression, as a kernel-builder cell gets it)
        "NVCC_APPEND_FLAGS": " ".join(filter(None, (
            os.environ.get("NVCC_APPEND_FLAGS"), "--objdir-as-tempdir",
            *compression_flags(cell.compress, toolchain.cuda.version)))),
        "PYTHONNOUSERSITE": "1", "PIP_NO_INDEX": "1",
    }


_CXX_NAME = re.compile(r"(clang\+\+|g\+\+|c\+\+)(-[0-9.]+)?$")
_C_OF_CXX = {"clang++": "clang", "g++": "gcc", "c++": "cc"}


def c_compiler(cxx: str) -> str:
    """The C compiler beside a C++ compiler command: /opt/gcc/bin/g++-12 -> /opt/gcc/bin/gcc-12,
    clang++ -> clang, c++ -> cc; any other name is used for both."""
    found = _CXX_NAME.search(cxx)
    if found is None:
        return cxx
    return cxx[:found.start()] + _C_OF_CXX[found[1]] + (found[2] or "")


def _issue(job: Job, toolchain: Toolchain, repaired: Path, applied: list[str]) -> Path:
    """The repaired wheel written again: the cell's version and torch pin, provenance, the
    factory's deterministic zip."""
    cell, work, log = job.cell, job.work, job.log
    _, built_version, _, _ = parse_wheel_filename(repaired.name)
    if built_version.public != Version(cell.version).public:
        log.write(f"note: the project's build calls it version {built_version}; the wheel is "
                  f"{cell.wheel_version}, the version the matrix (or the source's tag) gives")
    content = work / "final"
    if content.exists():
        shutil.rmtree(content)
    extra = unpack_wheel(repaired, content)
    metadata = reissued_metadata(cell, repaired.name, extra)
    if cell.guard:
        _guard_packages(job, content)
    if canonicalize_name(metadata.project) != canonicalize_name(cell.spec.name):
        raise BuildError(f"the project's build named its wheel '{metadata.project}', the "
                         f"project is '{cell.spec.name}'")
    facts = build_facts(toolchain, work, applied)
    found = _gpu_code(content)
    _note_beyond_cell(cell, found, content, log)
    extra[PROVENANCE_FILE] = provenance_file(cell, job.options, facts, content, found)
    return write_wheel(content, work / "dist", metadata, compressed_tag(repaired.name),
                       purelib=False, epoch=job.options.epoch(cell), extra_dist_info=extra)


def reissued_metadata(cell: Cell, wheel_name: str, dist_info: dict[str, bytes],
                      replace: Mapping[str, str] | None = None) -> GivenMetadata:
    """The METADATA of a backend's wheel (taken out of its unpacked `dist_info`, with the files
    the factory's writer makes again) with the cell's version, torch pin and distribution name,
    and `replace`'s requirements (relabelled)."""
    metadata_bytes = dist_info.pop("METADATA", b"")
    for generated in ("RECORD", "WHEEL", *_SIGNATURES):
        dist_info.pop(generated, None)
    if not metadata_bytes:
        raise BuildError(f"{wheel_name} has no METADATA")
    try:
        return relabelled(metadata_bytes, cell.wheel_version, f"torch{cell.torch_pin}",
                          name=cell.dist_name, replace=replace)
    except (UnicodeDecodeError, ValueError) as exc:
        raise BuildError(f"the METADATA of {wheel_name} cannot be re-issued ({exc})") from None


def import_first(init: Path, module: str) -> None:
    """The package's __init__.py imports its `module` before anything else (after its
    docstring and __future__ imports)."""
    text = init.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    lines.insert(first_statement_line(text),
                 f"from . import {module}  # noqa: F401  (kernel-wheel-factory)\n")
    init.write_text("".join(lines), encoding="utf-8")


GUARD_MODULE = "_kernel_wheel_factory_guard"


def _guard_packages(job: Job, content: Path) -> None:
    """The import guard kernel-builder wheels carry, given to each top-level package of the
    wheel: a module of its own, imported by the package's __init__.py before anything else
    (after its docstring and __future__ imports), so that a torch of another minor or CUDA
    major gets one clear ImportError instead of an undefined symbol. A compiled module at
    the top level, imported directly, gets none (there is no package to put it in)."""
    guard = cell_guard(job.cell, job.options)
    guarded = []
    for init in sorted(content.glob("*/__init__.py")):
        if init.parent.name.endswith((".libs", ".dist-info", ".data")):
            continue
        (init.parent / f"{GUARD_MODULE}.py").write_text(
            "# Generated by kernel-wheel-factory: refuses a torch this wheel was not built "
            "for.\nimport torch\n" + guard)
        import_first(init, GUARD_MODULE)
        guarded.append(init.parent.name)
    job.log.write(f"import guard: {', '.join(guarded) or 'no package to guard'}")


def first_statement_line(source: str) -> int:
    """The index of the line before which an import may go: after the module's docstring and
    its __future__ imports."""
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return 0
    at = 0
    for index, node in enumerate(body):
        docstring = index == 0 and isinstance(node, ast.Expr) and \
            isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        future = isinstance(node, ast.ImportFrom) and node.module == "__future__"
        if not (docstring or future):
            break
        at = node.end_lineno or node.lineno
    return at


def _note_beyond_cell(cell: Cell, found: dict[str, list[str]], content: Path, log: Log) -> None:
    """A line in the log when the project compiled GPU code the cell did not ask for (its own
    arch list, where the gencode rule is off or could not narrow it), with what that costs."""
    archs = {cap.arch for cap in cell.sms}
    beyond = sorted(code for code in {code for codes in found.values() for code in codes}
                    if code.partition("_")[2] not in archs)
    if not beyond:
        return
    sizes = gpu_code_sizes(content)
    extra = sum(sizes[code][0] for code in beyond if code in sizes)
    total = sum(size[0] for size in sizes.values())
    log.write(f"note: the wheel carries GPU code the cell did not ask for: {', '.join(beyond)} "
              f"({human_size(extra)} of its {human_size(total)} of GPU code, and the compile "
              "time it took): the project names these architectures itself"
              + ("" if any(rule.flag == "-gencode" for rule in cell.rules)
                 else ", and no -gencode toolchain rule is in force"))


def _gpu_code(content: Path) -> dict[str, list[str]]:
    """The SASS and PTX each shared object of the wheel holds, as the project compiled it."""
    found = {}
    for path in sorted(content.rglob("*.so*")):
        if path.is_file():
            entries = fatbin_entries(path)
            if entries:
                found[path.relative_to(content).as_posix()] = [str(entry) for entry in entries]
    return found
