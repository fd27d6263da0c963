"""The kit every project builder is handed: the job (one cell, where and how it is built),
what building gave, and the parts builders share: the cell's toolchain and torch, its staged
source, its guard and the facts its provenance records.

A cell builds in a fixed folder (<build root>/<cell key>) and every file of its wheel is dated
with the source's time, so building the same cell again gives the same bytes. (nvcc names a
file's internal-linkage symbols after a hash of its physical path: the folder cannot vary.)
The compilers of all the cells built at once share one budget of cores and memory
(compile/pool.py).
"""

from __future__ import annotations

import os
import platform
import shutil
import stat
import sys
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import defaults
from ..compile.generated import import_guard
from ..compile.objects import ObjectCache, ObjectStore, compilers_identity
from ..compile.pool import CompilePool
from ..config.torches import InstalledTorch
from ..errors import BuildError, Unavailable
from ..plan.costs import UnitCost
from ..plan.model import Cell
from ..policy import torch_release
from ..sources.installed import ProbeError, probe_interpreter
from ..sources.tree import IGNORED_DIRS
from ..system.process import Completed, Log, ProcessError, bounded_run, first_output_line
from ..toolchain import CommandPrefix, HostCompiler, Toolchain, cxx_standard, host_compiler
from ..toolchain.cuda import CudaToolkit, image_toolkit, provide_cuda
from ..toolchain.emulated import cross_compiler, emulation, provide_emulated_torch
from ..toolchain.python import find_python, manylinux_python
from ..toolchain.standard import compiler_shortfall, header_standard
from ..toolchain.torch import TorchEnv, installed_env, provide_torch
from ..values.versions import Version, major_minor
from ..wheel.elf import read_linkage
from .options import BuildOptions
from .records import toolchain_facts

__all__ = ["Built", "Compiling", "Container", "Job", "Progress", "build_facts", "cell_guard",
           "cell_toolchain", "cell_torch", "check_host_runtime", "compilers_of", "loadable",
           "stage_source", "unpack_wheel"]

Progress = Callable[[str], None]


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
class Compiling:
    """How a cell's units are compiled: the budget its compilers share with the other cells',
    the object cache (None: compile everything, as `factory verify` does), the costs earlier
    builds measured for its kernel and where new measurements go, and for one shard of a split
    cell the units to compile (nothing is linked then)."""

    pool: CompilePool
    objects: ObjectCache | None
    costs: Mapping[str, UnitCost]
    measured: Callable[[str, UnitCost], None]
    only: frozenset[str] | None = None
    shard: tuple[int, int] | None = None  # --unit-shard I/N: a build that cannot list its
    # units before it runs (a setup.py project's) compiles those whose names fall to shard I
    part: str = ""  # the object cache's part: "" on this machine, docker/<base> in containers
    cells: int = 1  # cells built at once: a cell built in a process of its own gets a share
    verify: float = 0.0  # the share of units taken from the object cache compiled again
    broker: str | None = None  # the socket of an object cache broker served from outside (the
    # docker runner's, for a build in a container that writes its own compile commands)

    @property
    def store(self) -> ObjectStore | None:
        return self.objects.part(self.part) if self.objects is not None else None


@dataclass(frozen=True)
class Built:
    """What building a cell gave: its wheel (None for a shard: objects only) and its units,
    how many were compiled and how many came from the object cache."""

    wheel: Path | None
    units: int = 0
    compiled: int = 0
    cached: int = 0


@dataclass(frozen=True)
class Job:
    """Where and how one cell is built: what every project builder is given."""

    cell: Cell
    cache: Path
    options: BuildOptions
    work: Path  # the cell's fixed build folder
    log: Log
    compiling: Compiling
    progress: Progress
    prepared: bool  # the toolkit and torch environment are in the (read-only) cache already
    container: Container | None


def compilers_of(toolchain: Toolchain, work: Path, *more: str) -> str:
    """What the compilers are (nvcc, the host compiler and `more`), asked where they run:
    part of every object's key."""
    def ask(argv: list[str]) -> Completed[str]:
        command, cwd = toolchain.runs_in.argv(argv, work)
        try:
            return bounded_run(command, defaults.COMPILER_PROBE_TIMEOUT, cwd=cwd)
        except ProcessError as exc:
            raise BuildError(f"{argv[0]} cannot be run ({exc})") from None

    tools = ([str(toolchain.cuda.nvcc)] if toolchain.cuda else []) + [toolchain.cxx]
    versions = [ask([tool, "--version"]).stdout
                for tool in dict.fromkeys([*tools, *more])]
    driver = ask([toolchain.cxx, "-###", "-c", "-x", "c++", "/dev/null", "-o", "/dev/null"])
    return compilers_identity(versions, driver.stderr)


def cell_toolchain(job: Job) -> Toolchain:
    """The toolkit, torch and host compiler of a compiled cell, made or found."""
    cell, log = job.cell, job.log
    assert cell.torch is not None  # a compiled cell
    installed = cell.installed
    job.progress("CUDA toolkit" if cell.cuda else "compiler")
    toolkit: CudaToolkit | None
    machine = job.options.machine
    if cell.cuda is None:  # a CPU cell
        toolkit, cxx = None, host_compiler(None, machine.cxx)
    elif installed is not None and installed.image is not None:
        if job.container is None:
            raise BuildError(f"{installed.describe()}: this torch lives in an image, which only "
                             "the docker runner can build in")
        toolkit = image_toolkit(installed)
        cxx = host_compiler(toolkit.version, machine.cxx, dict(installed.compilers),
                            "the image's PATH")
    else:
        toolkit = provide_cuda(cell.cuda.version, cell.cuda.home, job.cache, log,
                               job.options.offline, machine.cuda_homes)
        cxx = cross_compiler(cell.platform, machine) if cell.cross else \
            host_compiler(toolkit.version, machine.cxx)
    runs_in = CommandPrefix(job.container.exec_prefix if job.container else ())
    require_standard(cell.torch, cxx, runs_in)
    job.progress("torch environment")
    env = cell_torch(cell, job.cache, job.options, log, job.prepared)
    where = f", in a container of {installed.image}" if installed and installed.image else ""
    log.step(f"toolchain: {toolkit.describe() if toolkit else 'no CUDA (a CPU cell)'}, torch "
             f"{env.torch_version} ({env.root}), host compiler {cxx.command} (from "
             f"{cxx.origin}){where}")
    for dependency in cell.depends:
        log.step(f"C++ dependency: {dependency.describe()}")
    toolchain = Toolchain(toolkit, env, cxx.command, cxx_standard(cell.torch), runs_in,
                          cell.depends, cxx.origin)
    if not runs_in.prefix:
        # the factory's images hold a plain g++; a machine's own $CXX may be anything
        check_host_runtime(toolchain, job.work, log)
    return toolchain


def require_standard(torch: Version, cxx: HostCompiler, runs_in: CommandPrefix) -> None:
    """Skip, before the torch environment is made and anything compiles, a cell whose host
    compiler cannot give the C++ standard its torch's headers demand."""
    problem = compiler_shortfall(torch, cxx.command, cxx.origin,
                                 lambda argv: runs_in.argv(argv, Path("/")))
    if problem is not None:
        advice = "this image cannot build it" if runs_in.prefix else \
            f"set CXX to a compiler that does (g++ {header_standard(torch).gcc} or newer)"
        raise Unavailable(f"{problem}: {advice}")


_PROBE = """#include <stdexcept>
void factory_probe(int n) { if (n) throw std::runtime_error("probe"); }
"""


def check_host_runtime(toolchain: Toolchain, work: Path, log: Log) -> None:
    """Refuse, before anything compiles, a host compiler that links libstdc++ into shared
    objects (a wrapper adding -static-libstdc++, say): every wheel it links fails the
    libstdc++ gate, but only after the whole compile."""
    folder = work / "cxx-probe"
    folder.mkdir(parents=True, exist_ok=True)
    source, linked = folder / "probe.cpp", folder / "probe.so"
    source.write_text(_PROBE)
    named = f"the host compiler {toolchain.cxx} (from {toolchain.cxx_origin})"
    try:
        done = bounded_run([toolchain.cxx, "-shared", "-fPIC", "-o", str(linked), str(source)],
                           defaults.COMPILER_PROBE_TIMEOUT, cwd=folder)
    except ProcessError as exc:
        raise BuildError(f"{named} cannot be run ({exc})") from None
    if done.returncode != 0 or not linked.is_file():
        log.write(done.stdout + done.stderr)
        said = next((line for line in done.stderr.splitlines() if line.strip()), "no output")
        raise BuildError(f"{named} cannot link a one-line shared object: {said}")
    if read_linkage(linked).own_cxx_runtime:
        raise BuildError(f"{named} links libstdc++ into shared objects statically (as "
                         "-static-libstdc++ does): every wheel it links would fail the "
                         "libstdc++ gate; set CXX to a compiler that links libstdc++.so.6, "
                         "as torch does (e.g. CXX=/usr/bin/g++)")


def cell_torch(cell: Cell, cache: Path, options: BuildOptions, log: Log,
               prepared: bool) -> TorchEnv:
    """The torch environment of a compiled cell: the installed torch it names, or the one the
    factory makes in its cache (with `prepared`, made already: a builder container's cache is
    read-only)."""
    assert cell.torch is not None
    installed = cell.installed
    if cell.cuda is None:  # a CPU cell: the CPU index's torch, else PyPI's (its CPU ops)
        release = torch_release(cell.torch)
        cuda = release.pypi_cuda if release and cell.cpu_index is None else None
        return provide_torch(cell.torch, cuda, cell.cpu_index, cache, log,
                             create=not prepared, offline=options.offline)
    if installed is not None:
        if installed.image is None:
            _check_unchanged(installed)
        return installed_env(installed)
    if cell.cross:
        machine = options.machine
        target = emulation(cell.platform, machine.cross_compiler(cell.platform))
        return provide_emulated_torch(cell.torch, cell.cuda.version, cell.cuda.torch_index,
                                      cache, log, target, machine, create=not prepared,
                                      offline=options.offline)
    python = sys.executable
    if cell.python is not None:
        python = str(manylinux_python(cell.python) if prepared else
                     find_python(cell.python, cache, log, options.offline))
    return provide_torch(cell.torch, cell.cuda.version, cell.cuda.torch_index, cache, log,
                         python=python, create=not prepared, offline=options.offline)


def loadable(cell: Cell) -> str | None:
    """Why the cell's wheel cannot be loaded here (to prove it), or None when it can."""
    if not cell.compiled:
        return "a pure-Python wheel: it has no shared object to load"
    machine = platform.machine()
    if cell.platform != machine and not cell.cross:
        return f"an {cell.platform} wheel cannot be loaded on this {machine} machine"
    return None


def testable(cell: Cell) -> str | None:
    """Why the kernel's own tests cannot prove the cell's wheel, or None when they can run."""
    if not (cell.spec.root / "tests").is_dir():
        return "the kernel has no tests/ folder"
    if not cell.compiled:
        return ("a pure-Python wheel is tested in the matrix's CUDA cells, with their torch, "
                "and the matrix has none this machine can test it in")
    return None


def _check_unchanged(installed: InstalledTorch) -> None:
    """The interpreter still has the torch the plan read (it may have changed since)."""
    try:
        now = probe_interpreter(Path(installed.python))
    except ProbeError as exc:
        raise BuildError(str(exc)) from None
    if now.version != installed.version or now.site_packages != installed.site_packages:
        raise BuildError(f"{installed.python} had torch {installed.version} when the build was "
                         f"planned and has {now.version} in {now.site_packages} now")


def build_facts(toolchain: Toolchain, work: Path, rules: Sequence[str] = ()) -> dict[str, str]:
    """The provenance's toolchain facts of a compiled cell, each tool asked where it ran, and
    what its toolchain rules changed (cells/compilers.py's log_changes)."""
    def ask(argv: list[str]) -> str:
        command, _ = toolchain.runs_in.argv(argv, work)
        return first_output_line(command)

    cuda = toolchain.cuda
    facts = toolchain_facts(toolchain.cxx, f"{cuda.version} ({cuda.origin})" if cuda else None,
                            toolchain.torch.torch_version, ask, toolchain.cxx_origin)
    if toolchain.torch.emulated:
        # another platform's build: the Python headers are its emulated CPython's
        headers = [name for name in toolchain.torch.emulated
                   if name.startswith("libpython") and "-dev " in name]
        facts["target_python"] = f"{toolchain.torch.platform}: Debian {', '.join(headers)}"
    if rules:
        facts["toolchain_rules"] = "; ".join(rules)
    return facts


def unpack_wheel(wheel: Path, target: Path) -> dict[str, bytes]:
    """The repaired wheel's files unpacked into `target`, but for its .dist-info, whose files
    are returned (by their names inside it): the wheel is written again, by the factory's own
    deterministic writer."""
    dist_info = {}
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            top, _, rest = info.filename.partition("/")
            if info.is_dir():
                continue
            if top.endswith(".dist-info"):
                dist_info[rest] = archive.read(info)
                continue
            path = target / info.filename
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(archive.read(info))
            if (info.external_attr >> 16) & 0o111:
                path.chmod(0o755)
    return dist_info


def stage_source(root: Path, target: Path) -> None:
    """A private copy of the kernel repo to build in: the user's tree is never written."""
    shutil.copytree(root, target, symlinks=True,
                    ignore=shutil.ignore_patterns(*IGNORED_DIRS, "*.pyc"))
    # Fetched trees are read-only; the generated files replace committed copies in this one.
    for folder, _, files in os.walk(target):
        for name in files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                os.chmod(path, os.stat(path).st_mode | stat.S_IWUSR)


def cell_guard(cell: Cell, options: BuildOptions) -> str:
    """The import guard of a compiled cell's wheel: it refuses a torch of another minor or CUDA
    major (or, built against a torch no index publishes, any other build), naming the index
    of the user's torch (its full URL when the index's public URL is known)."""
    assert cell.torch is not None
    torch = major_minor(cell.torch)
    maxver = cell.spec.torch.maxver if cell.spec.torch else None
    stable = None if cell.stable_abi is None else \
        (torch, major_minor(maxver) if maxver else None)
    return import_guard(cell.distribution, cell.wheel_version, str(torch),
                        str(major_minor(cell.cuda.version)) if cell.cuda else "",
                        defaults.CPU_LABEL_TEMPLATE if cell.cuda is None
                        else cell.label_template or cell.label or "",
                        exact=cell.installed.version if cell.installed and cell.installed.exact
                        and stable is None else None,
                        index_url=options.index_url, stable=stable)

