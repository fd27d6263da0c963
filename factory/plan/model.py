"""The planner's values: a plan, its cells (what to build, for which SMs, from which units),
the cells it skips and those a stable-ABI wheel serves. Frozen, made by plan/cells.py and read
by every later step; nothing here reads a file or starts a program.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any, Literal, Protocol

from .. import defaults
from ..config.model import (
    ALL_TESTS,
    CompressMode,
    CudaEntry,
    KernelEntry,
    Matrix,
    TestSelection,
)
from ..config.rules import ToolchainRule
from ..config.spec import KernelSpec, ProjectKind
from ..config.torches import InstalledTorch
from ..policy.capabilities import Capability
from ..sources.depends import Dependency
from ..sources.facts import NO_FACTS, SourceFacts
from ..sources.tree import SourceTree
from ..values.pythons import CPython
from ..values.versions import Version, major_minor

__all__ = ["CUDA_SUFFIXES", "CXX_SUFFIXES", "HEADER_SUFFIXES", "Cell", "Kernel", "KindPlan",
           "Layouts", "Placement", "Plan", "PythonSettings", "SectionPlan", "ServedCell",
           "SkippedCell", "Unit", "merged_unit", "sass_for_sms", "stable_pin", "units_code",
           "wrong_host"]

Placement = Literal["host", "image", "builder", "cross", "cpu"]
"""Where a cell is built: on this machine (host; cross: compiled for another platform, its
gates emulated; cpu: a CPU cell), in a container of the image that holds its torch (image), or
in the factory's builder container of its CUDA version and platform (builder)."""

CUDA_SUFFIXES = frozenset({".cu"})
CXX_SUFFIXES = frozenset({".cpp", ".cc", ".cxx", ".c++", ".c"})
HEADER_SUFFIXES = frozenset({".h", ".hh", ".hpp", ".hxx", ".cuh", ".inc", ".inl", ".tcc", ".ipp"})


@dataclass(frozen=True)
class SectionPlan:
    """How one [kernel.*] section of a cell is compiled."""

    name: str
    archs: tuple[Capability, ...]
    skipped: str | None = None  # why it is left out of this cell (its cuda-minver)
    dropped: tuple[Capability, ...] = ()  # declared capabilities this toolkit cannot build
    no_sm: bool = False  # left out because its capabilities select no SM of the cell
    # A kept source calls functions only this section defines: it is then built for its own
    # capabilities (archs) although they select no SM of the cell, or, where the toolkit can
    # build none of them (skipped), the cell cannot be built.
    called: str | None = None

    @property
    def widened(self) -> bool:
        """Built for its own capabilities, outside the cell's SMs, for a kept caller."""
        return self.called is not None and not self.skipped


@dataclass(frozen=True)
class Unit:
    """One source file of a cell, with the settings of the section that lists it."""

    section: str  # "torch" for the [torch] binding, else the [kernel.*] name
    source: str  # repo-relative
    include: tuple[str, ...]
    cxx_flags: tuple[str, ...]
    cuda_flags: tuple[str, ...]
    archs: tuple[Capability, ...]
    depends: tuple[str, ...]

    @property
    def is_cuda(self) -> bool:
        return PurePosixPath(self.source).suffix.lower() in CUDA_SUFFIXES

    @property
    def compiled(self) -> bool:
        """Whether the unit becomes an object (headers listed in `src` do not)."""
        return PurePosixPath(self.source).suffix.lower() not in HEADER_SUFFIXES


# A cell's CPython (None: the torch environment's interpreter), whether its wheel serves that
# CPython only, and the matrix's variables for the project's own build.
PythonSettings = tuple[CPython | None, bool, tuple[tuple[str, str], ...]]


class Layouts(Protocol):
    """The ways the planner lays a kernel's cells over the matrix (plan/cells.py's Planner);
    a kind of project picks those it takes."""

    def per_torch(self, kernel: Kernel) -> None:
        """A cell per torch x CUDA x platform (x CPython)."""

    def stable(self, kernel: Kernel) -> None:
        """One stable-ABI cell per CUDA major x platform, serving the others."""

    def cpu(self, kernel: Kernel) -> None:
        """A CPU cell per torch x platform, where the matrix asks for CPU cells."""

    def noarch(self, kernel: Kernel) -> None:
        """One pure-Python wheel, or one per torch x CUDA for a run-time compiler."""


class KindPlan(Protocol):
    """What planning asks of a kind of kernel project: the planner's half of the protocol
    every kind's package in cells/kinds/ answers (cells/kinds/__init__.py adds the rest)."""

    name: ProjectKind
    form: ProjectKind  # the files it is read from: a build.toml repo, or a PEP 517 project
    cross_compiles: bool  # the factory's compilers build it: a cell may be cross-compiled
    own_python: bool  # built by a CPython of its own per cell, not the torch environment's
    free_threaded: bool  # a free-threaded CPython can load what it builds
    units_seen: bool  # its build writes its own compile commands: its units are those its
    # builds were seen to compile (the cost book), not read from its files

    def plan(self, layouts: Layouts, kernel: Kernel) -> None:
        """Lay the kernel's cells over the matrix."""

    def abi3(self, spec: KernelSpec) -> bool:
        """Whether one wheel, built with the oldest CPython of the cell, serves every CPython
        with the GIL (for a kind with its own Python)."""

    def shape(self, cell: Cell) -> tuple[Cell, str | None]:
        """The slot's cell as this kind builds it, or why it has none there."""

    def gpu_code(self, cell: Cell) -> frozenset[str]:
        """The SASS (sm_XY) and PTX (compute_XY) the cell's wheel must carry."""

    def stable_abi(self, cell: Cell) -> Version | None:
        """The torch stable ABI version the cell targets, if any."""

    def record(self, cell: Cell) -> dict[str, Any]:
        """The fields of the cell's record that are this kind's own."""

    def settings(self, record: Mapping[str, Any]) -> PythonSettings:
        """The CPython settings a record of this kind names (KeyError, TypeError or
        ValueError where they are malformed: the codec says so)."""

    def describe(self, spec: KernelSpec) -> str:
        """What the project is, in words: "kernel-builder repo, build.toml dialect 3"."""


@dataclass(frozen=True)
class Kernel:
    """A matrix entry with its resolved source, its read build.toml, its wheel version, what
    planning needs to know of its files and the kind of project it is."""

    entry: KernelEntry
    source: SourceTree
    spec: KernelSpec
    version: str
    facts: SourceFacts
    kind: KindPlan


@dataclass(frozen=True)
class Cell:
    """One wheel to build: a kernel for one torch x CUDA x platform (or one noarch wheel)."""

    spec: KernelSpec
    source: SourceTree
    version: str
    torch: Version | None
    cuda: CudaEntry | None
    platform: str
    label: str | None
    sms: tuple[Capability, ...]
    sections: tuple[SectionPlan, ...]
    kind: KindPlan = field(compare=False, repr=False)  # the kind of project it builds
    label_template: str | None = None  # the matrix's label, e.g. cu{cuda}torch{torch}
    installed: InstalledTorch | None = None  # the torch built against, when already installed
    depends: tuple[Dependency, ...] = ()  # the C++ dependencies its sections name, fetched
    # the CPython it is built with: a PEP 517 project's, or a free-threaded one (any project)
    python: CPython | None = None
    per_python: bool = False  # the wheel serves that CPython only (cp312-cp312), not abi3
    env: tuple[tuple[str, str], ...] = ()  # the matrix's variables for the project's build
    guard: bool = True  # a PEP 517 project's packages get the import guard
    compress: CompressMode | None = None  # its GPU code's compression (None: nvcc's default)
    tests: TestSelection = ALL_TESTS  # which of the kernel's own tests prove the wheel
    dist_name: str | None = None  # the wheel's distribution name, where dist-name renames it
    cross: bool = False  # built on a machine of another platform (defaults.CROSS_BUILT)
    cpu_index: str | None = None  # a CPU cell's torch index (matrix `cpu: {torch-index}`)
    rules: tuple[ToolchainRule, ...] = ()  # the toolchain rules in force for its torch
    needs_gil: bool = False  # the kernel declares that its modules need the GIL (needs-gil:)
    placement: Placement | None = None  # where it is built, once placed (plan/placement.py)
    # what was read of its files before planning (its sources' sizes and symbols)
    facts: SourceFacts = field(default=NO_FACTS, compare=False, repr=False)
    # a pure-Python wheel for all: the CUDA cells of the matrix it is imported and tested in,
    # each with that cell's torch (plan/cells.py's proofs)
    proofs: tuple[Cell, ...] = field(default=(), compare=False, repr=False)

    @property
    def free_threaded(self) -> bool:
        """Whether the wheel is for a free-threaded CPython (cp314t): no abi3, and the import
        gate checks that loading it keeps the GIL disabled."""
        return self.python is not None and self.python.free_threaded

    @property
    def backend(self) -> str:
        """The kernel backend the cell builds: cuda, or cpu for a CPU cell (a compiled cell
        with no CUDA version)."""
        return "cpu" if self.cuda is None and self.torch is not None else "cuda"

    @property
    def compiled(self) -> bool:
        """Whether the wheel holds a shared object (every cell but a pure-Python one)."""
        return self.torch is not None

    @property
    def distribution(self) -> str:
        """The name the wheel is published under: the kernel's, or what dist-name makes of it
        (the package it imports keeps the kernel's name)."""
        return self.dist_name or self.spec.name

    @property
    def id(self) -> str:
        if self.label is None:
            return f"{self.spec.name}/noarch"
        base = f"{self.spec.name}/{self.label}/{self.platform}"
        return f"{base}/{self.python_tag}" if self.per_python else base

    @property
    def python_tag(self) -> str | None:
        """The ABI tag of the CPython it is built with: cp312 for 3.12, cp314t for 3.14t."""
        return self.python.abi_tag if self.python else None

    @property
    def key(self) -> str:
        """The id as a file name: img2gray-cu130torch211-x86_64."""
        return re.sub(r"[^A-Za-z0-9._-]+", "-", self.id)

    @property
    def wheel_version(self) -> str:
        return self.version if self.label is None else f"{self.version}+{self.label}"

    @property
    def torch_shown(self) -> str | None:
        """The torch as pages show it: major.minor, or the whole version of a build no index
        publishes."""
        if self.installed is not None and self.installed.exact:
            return self.installed.version
        return str(self.torch) if self.torch else None

    @property
    def stable_abi(self) -> Version | None:
        """The torch stable ABI version a compiled cell of a kernel-builder kernel targets:
        its wheel then serves every torch from the one it is built against on."""
        return self.kind.stable_abi(self)

    @property
    def torch_pin(self) -> str:
        """The specifier of the wheel's Requires-Dist on torch (compiled cells): the torch
        minor it was built against, or, for a stable-ABI build, that torch and every later one
        up to the kernel's torch maxver."""
        assert self.torch is not None
        if self.stable_abi is not None:
            return stable_pin(major_minor(self.torch), self.spec)
        return self.installed.pin if self.installed else f"=={major_minor(self.torch)}.*"

    @property
    def ops_namespace(self) -> str:
        return f"_{self.spec.python_name}_{self.source.short}"

    @property
    def units(self) -> tuple[Unit, ...]:
        """Every source the cell compiles: the [torch] binding's, built for the cell's SMs, and
        those of each CUDA [kernel.*] section the cell keeps, built for its planned archs. A
        source that several kept sections list is one unit (CMake compiles a file once),
        with the archs, include folders, flags and dependencies of all of them."""
        spec = self.spec
        units: dict[str, Unit] = {}
        if spec.torch is not None:
            for source in spec.torch.src:
                units[source] = Unit("torch", source, spec.torch.include, spec.torch.cxx_flags,
                                     (), self.sms, ("torch",))
        sections = {section.name: section for section in spec.kernels_for(self.backend)}
        for plan in self.sections:
            if plan.skipped:
                continue
            section = sections[plan.name]
            for source in section.src:
                unit = Unit(section.name, source, section.include, section.cxx_flags,
                            section.cuda_flags, plan.archs, section.depends)
                units[source] = merged_unit(units[source], unit) if source in units else unit
        return tuple(units.values())

    @property
    def gpu_code(self) -> frozenset[str]:
        """The SASS (sm_XY) and PTX (compute_XY) the cell's wheel must carry, as its kind
        says (units_code or sass_for_sms)."""
        return self.kind.gpu_code(self)

    @property
    def widened(self) -> dict[str, str]:
        """Each section built for its own capabilities outside the cell's SMs, and why."""
        return {plan.name: f"built for {' '.join(str(a) for a in plan.archs)}, outside the "
                           f"cell's SMs, because {plan.called}"
                for plan in self.sections if plan.widened}


def units_code(cell: Cell) -> frozenset[str]:
    """The SASS and PTX of the archs each CUDA unit of the cell is compiled for."""
    code = set()
    for unit in cell.units:
        if not unit.is_cuda:
            continue
        for cap in unit.archs:
            code.add(f"sm_{cap.arch}")
            if cap.ptx:
                code.add(f"compute_{cap.arch}")
    return frozenset(code)


def sass_for_sms(cell: Cell) -> frozenset[str]:
    """SASS for every SM of the cell: what a build that picks its own archs must carry."""
    return frozenset(f"sm_{cap.arch}" for cap in cell.sms)


def stable_pin(torch: Version, spec: KernelSpec) -> str:
    """>=2.11, with the kernel's torch maxver as the upper bound (<2.14 for a maxver of 2.13):
    the stable ABI itself promises every later torch (PyTorch keeps it for years and names no
    last version)."""
    maxver = spec.torch.maxver if spec.torch else None
    upper = f",<{maxver.major}.{maxver.minor + 1}" if maxver else ""
    return f">={torch}{upper}"


@dataclass(frozen=True)
class ServedCell:
    """A torch x CUDA x platform cell of a stable-ABI kernel that is not built on its own: the
    stable-ABI wheel of cell `by` is listed in its index."""

    id: str
    by: str
    label: str
    version: str
    torch: Version
    cuda: Version
    platform: str


@dataclass(frozen=True)
class SkippedCell:
    id: str
    reason: str
    version: str | None = None
    torch: Version | None = None
    cuda: Version | None = None
    label: str | None = None
    cpu: bool = False  # a CPU cell (`cpu:` in the matrix)


@dataclass(frozen=True)
class Plan:
    matrix: Matrix
    cells: tuple[Cell, ...]
    skipped: tuple[SkippedCell, ...]
    served: tuple[ServedCell, ...] = ()  # go with the cell that builds their wheel
    renamed: tuple[tuple[str, str], ...] = ()  # (kernel, distribution) where dist-name renames

    def distribution(self, kernel: str) -> str:
        """The distribution name of a kernel of the plan."""
        return dict(self.renamed).get(kernel, kernel)

    def only(self, patterns: list[str]) -> Plan:
        """The cells whose id matches one of the glob patterns (e.g. 'img2gray/*torch211*'); a
        stable-ABI cell is kept when a cell it serves matches."""
        def keep(cell_id: str) -> bool:
            return any(fnmatch.fnmatchcase(cell_id, pattern) for pattern in patterns)

        builders = {served.by for served in self.served if keep(served.id)}
        return self._keeping({c.id for c in self.cells if keep(c.id) or c.id in builders},
                             {s.id for s in self.skipped if keep(s.id)})

    def on_host(self, host: str) -> Plan:
        """The cells another platform has to build, moved to the skipped ones."""
        foreign = [c for c in self.cells if c.platform not in (host, "any") and
                   not (c.cross and defaults.CROSS_BUILT.get(c.platform) == host)]
        skipped = [SkippedCell(c.id, wrong_host(c.platform, host), c.version, c.torch,
                               c.cuda.version if c.cuda else None, c.label,
                               cpu=c.backend == "cpu") for c in foreign]
        gone = {c.id for c in foreign}
        return Plan(self.matrix, tuple(c for c in self.cells if c not in foreign),
                    self.skipped + tuple(skipped),
                    tuple(s for s in self.served if s.by not in gone), self.renamed)

    def select(self, ids: set[str]) -> Plan:
        """The cells (built or skipped) whose id is in `ids`."""
        return self._keeping(ids, ids)

    def _keeping(self, cells: set[str], skipped: set[str]) -> Plan:
        return Plan(self.matrix, tuple(c for c in self.cells if c.id in cells),
                    tuple(s for s in self.skipped if s.id in skipped),
                    tuple(s for s in self.served if s.by in cells), self.renamed)

    def serves(self, cell_id: str) -> tuple[ServedCell, ...]:
        """The cells whose index lists the wheel of cell `cell_id` besides its own."""
        return tuple(served for served in self.served if served.by == cell_id)


def merged_unit(first: Unit, other: Unit) -> Unit:
    """One unit for a source two sections list: archs by architecture (with PTX where either
    asks for it), include folders and dependencies of both in order, each section's flags once."""
    archs: dict[str, Capability] = {}
    for cap in (*first.archs, *other.archs):
        known = archs.get(cap.arch)
        archs[cap.arch] = cap if known is None or cap.ptx else known

    def flags(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
        return a if b == a or not b else a + b

    return Unit(first.section, first.source,
                tuple(dict.fromkeys((*first.include, *other.include))),
                flags(first.cxx_flags, other.cxx_flags), flags(first.cuda_flags, other.cuda_flags),
                tuple(sorted(archs.values())),
                tuple(dict.fromkeys((*first.depends, *other.depends))))


def wrong_host(platform: str, host: str) -> str:
    return f"a {platform} cell needs a {platform} machine; this one is {host}"
