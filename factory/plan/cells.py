"""Expand a matrix and its kernels into cells: what to build, with which SMs, and what to skip
(the values made are plan/model.py's).

Pure planning: no compiler, no network, no files written. Everything a build could trip over
that is knowable up front is decided here, so bad input fails before any work starts. A cell
also says what it will compile for which architectures (its units) and so what GPU code its
wheel must carry: the gates hold the wheel to that promise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

from packaging.utils import canonicalize_name
from packaging.version import Version as PackagingVersion

from .. import defaults
from ..config.model import (
    ALL_TESTS,
    CompressMode,
    CudaEntry,
    KernelEntry,
    Matrix,
    TestSelection,
    TorchEntry,
    distribution_name,
    is_project_name,
)
from ..config.rules import ToolchainRule, rules_for
from ..config.spec import KernelSection, KernelSpec
from ..config.torches import InstalledTorch
from ..errors import ConfigError
from ..policy import cuda_policy, dependency_release, torch_release
from ..policy.capabilities import (
    Capability,
    check_supported,
    loose_intersection,
    with_ptx_for_newest,
)
from ..sources.depends import Dependency
from ..sources.facts import NO_FACTS, SourceFacts
from ..sources.symbols import base_name
from ..sources.tree import SourceTree
from ..values.pythons import CPython
from ..values.versions import Version, compact, major_minor
from .labels import check_label, matrix_labels, render_label
from .model import (
    HEADER_SUFFIXES,
    Cell,
    Kernel,
    KindPlan,
    Plan,
    SectionPlan,
    ServedCell,
    SkippedCell,
    wrong_host,
)

__all__ = ["Planner", "check_unique_names", "cuda_bounds_reason", "dependency_names",
           "make_cell", "make_cpu_cell", "make_plan", "noarch_cell", "runtime_compiled",
           "skip_reason", "stable_abi_reason", "torch_bounds_reason", "widened_notes"]


def widened_notes(plan: Plan) -> list[str]:
    """One line per kernel section that some cells build outside their SMs, naming them."""
    cells: dict[tuple[str, str, str], list[str]] = {}
    for cell in plan.cells:
        for name, why in cell.widened.items():
            cells.setdefault((cell.spec.name, name, why), []).append(cell.label or cell.id)
    return [f"note: {kernel} [kernel.{section}] selects no SM of {', '.join(labels)}; it is "
            f"{why}: leaving it out would give a wheel that fails to load"
            for (kernel, section, why), labels in cells.items()]


def make_plan(matrix: Matrix, kernels: list[Kernel], host: str | None,
              dependencies: Mapping[str, Dependency] | None = None) -> Plan:
    """The matrix's cells. `host` (this machine's platform) skips the cells of others; None
    keeps every platform's cells (a CI plan, whose jobs run on several kinds of machine).
    `dependencies` are the fetched C++ dependencies of every kernel (dependency_names)."""
    check_unique_names(matrix, kernels)
    renamed = distributions(matrix, kernels)
    planner = Planner(matrix, host, dependencies)
    for kernel in kernels:
        spec = kernel.spec
        if spec.framework == "tvm-ffi":
            raise ConfigError("tvm-ffi kernels are not supported; the factory builds torch "
                              "extensions ([torch] or [torch-noarch])", file=spec.build_toml,
                              key="tvm-ffi")
        kernel.kind.plan(planner, kernel)

    for index, exclude in enumerate(matrix.excludes):
        if index not in planner.used_excludes and exclude.line is not None:  # not cuda.follow's
            raise ConfigError("this exclude entry matches no cell of the matrix",
                              file=matrix.path, line=exclude.line, key=f"exclude[{index}]")
    cells = tuple(replace(cell, dist_name=renamed[cell.spec.name])
                  if cell.spec.name in renamed else cell for cell in planner.cells)
    return Plan(matrix, cells, tuple(planner.skipped), tuple(planner.served),
                tuple(sorted(renamed.items())))


def distributions(matrix: Matrix, kernels: list[Kernel]) -> dict[str, str]:
    """The kernels whose dist-name (their own, else the matrix's) renames their distribution,
    with the name it gives; two kernels may not end up with one name."""
    renamed: dict[str, str] = {}
    owners: dict[str, KernelEntry] = {}
    for kernel in kernels:
        template = kernel.entry.dist_name or matrix.dist_name
        name = distribution_name(template, kernel.spec.name)
        if not is_project_name(name):  # only a kernel name the template cannot take
            raise ConfigError(f"dist-name gives '{name}' for {kernel.spec.name}, which is not a "
                              "distribution name", file=matrix.path, line=kernel.entry.line,
                              key=f"{kernel.entry.key}.dist-name")
        other = owners.get(canonicalize_name(name))
        if other is not None:
            raise ConfigError(f"{kernel.entry.key} and {other.key} would both be published as "
                              f"'{name}': give one of them a dist-name of its own",
                              file=matrix.path, line=kernel.entry.line, key="dist-name")
        owners[canonicalize_name(name)] = kernel.entry
        if name != kernel.spec.name:
            renamed[kernel.spec.name] = name
    return renamed


@dataclass(frozen=True)
class _Slot:
    """One torch x CUDA x platform of the matrix, for one kernel."""

    entry: TorchEntry
    cuda: CudaEntry
    platform: str
    label: str
    id: str


class Planner:
    """The cells of a matrix, kernel by kernel: each kernel's kind picks the layouts its
    cells take (plan/model.py's Layouts). A kernel whose capabilities select no SM of a cell
    is skipped there with that reason, even where it fits no cell at all: the other kernels
    plan as before."""

    def __init__(self, matrix: Matrix, host: str | None,
                 dependencies: Mapping[str, Dependency] | None) -> None:
        self.matrix = matrix
        self.host = host
        self.dependencies = dependencies
        self.labels = matrix_labels(matrix)
        self.used_excludes: set[int] = set()
        self.cells: list[Cell] = []
        self.skipped: list[SkippedCell] = []
        self.served: list[ServedCell] = []

    def slots(self, kernel: Kernel) -> list[_Slot]:
        """The kernel's torch x CUDA x platform cells that no exclude entry removes."""
        found = []
        for entry in self.matrix.torch:
            for cuda in self.matrix.cuda:
                label = self.labels.get((entry, major_minor(cuda.version)))
                if label is None:  # an installed torch of another CUDA version
                    continue
                for platform in _platforms(self.matrix, entry):
                    if not _excluded(self.matrix, kernel.spec.name, entry.release, cuda.version,
                                     platform, self.used_excludes):
                        found.append(_Slot(entry, cuda, platform, label,
                                           f"{kernel.spec.name}/{label}/{platform}"))
        return found

    def skip(self, kernel: Kernel, slot: _Slot, reason: str) -> None:
        self.skipped.append(SkippedCell(slot.id, reason, kernel.version, slot.entry.release,
                                        slot.cuda.version, slot.label))

    def cell(self, kernel: Kernel, slot: _Slot, label: str | None = None,
             python: CPython | None = None, per_python: bool = False) -> Cell:
        cell = make_cell(kernel.spec, kernel.kind, kernel.source, kernel.version,
                         slot.entry.release,
                         slot.cuda, slot.platform, label or slot.label, self.matrix.label,
                         slot.entry.installed, self.dependencies, python, per_python,
                         kernel.entry.env, kernel.entry.guard,
                         kernel.entry.compress or self.matrix.compress, kernel.entry.tests,
                         facts=kernel.facts)
        cell = replace(cell, rules=self.rules(kernel, slot.entry.release),
                       needs_gil=kernel.entry.needs_gil)
        cross = crosses(self.matrix.cross, kernel.kind, slot.platform, slot.entry.installed)
        # a machine of the cell's own platform builds it natively (None: a CI plan's job)
        return replace(cell, cross=True) if cross and self.host != slot.platform else cell

    def rules(self, kernel: Kernel, torch: Version) -> tuple[ToolchainRule, ...]:
        """The toolchain rules in force for a kernel's cell: its own, else the matrix's."""
        return rules_for(self.matrix.rules if kernel.entry.rules is None
                         else kernel.entry.rules, torch)

    def per_torch(self, kernel: Kernel) -> None:
        """A cell per torch x CUDA x platform (x CPython); the cells skipped only because
        they have no SM to compile for come after the others."""
        no_sm: list[SkippedCell] = []
        for slot in self.slots(kernel):
            reason = skip_reason(kernel.spec, kernel.kind, slot.entry.release, slot.cuda,
                                 slot.platform, self.host, slot.entry.installed,
                                 self.matrix.cross) or \
                _index_only(slot.entry)
            if reason:
                self.skip(kernel, slot, reason)
                continue
            pythons, unserved = _pythons(self.matrix, kernel, slot.entry)
            for missing, why in unserved:
                self.skipped.append(SkippedCell(
                    f"{slot.id}/{missing.abi_tag}", why, kernel.version,
                    slot.entry.release, slot.cuda.version, slot.label))
            for python, per_python in pythons:
                cell = self.cell(kernel, slot, python=python, per_python=per_python)
                if cell.free_threaded and cell.cross:
                    self.skipped.append(SkippedCell(
                        cell.id, f"a cross-compiled cell is proven with Debian's {slot.platform} "
                        f"CPython, which has no free-threaded build", kernel.version,
                        slot.entry.release, slot.cuda.version, slot.label))
                    continue
                cell, reason = kernel.kind.shape(cell)
                if reason:
                    self.skip(kernel, slot, reason)
                    continue
                reason = _unloadable(cell)
                if reason:
                    self.skip(kernel, slot, reason)
                    continue
                reason = _nothing_to_compile(cell)
                if reason:
                    no_sm.append(SkippedCell(slot.id, reason, kernel.version,
                                             slot.entry.release, slot.cuda.version, slot.label))
                    continue
                self.cells.append(cell)
        self.skipped += no_sm

    def noarch(self, kernel: Kernel) -> None:
        """A pure-Python kernel: one wheel for all, or one per cell for a kernel that compiles
        GPU code when it runs (runtime_compiled) where the matrix has such cells."""
        if runtime_compiled(kernel.spec, kernel.facts) is not None and \
                self.per_cell_noarch(kernel):
            return
        if not _excluded(self.matrix, kernel.spec.name, None, None, "any", self.used_excludes):
            cell = noarch_cell(kernel.spec, kernel.kind, kernel.source, kernel.version,
                               kernel.entry.tests, kernel.facts)
            self.cells.append(replace(cell, proofs=self.proofs(kernel)))

    def proofs(self, kernel: Kernel) -> tuple[Cell, ...]:
        """Where a pure-Python wheel for all is proven: in each CUDA cell of the matrix (on this
        machine's platform, as a runtime compiler's cells are) whose torch the kernel takes,
        with that cell's torch. The wheel is the same in each; what its tests say of it may
        not be (another torch, another CUDA)."""
        platforms = self.matrix.platforms
        platform = self.host if self.host in platforms else platforms[0]
        found = []
        for slot in self.slots(kernel):
            if slot.platform == platform and not (
                    _kernel_reason(kernel.spec, slot.entry.release, slot.cuda) or
                    _index_only(slot.entry) or
                    _build_reason(slot.entry.release, slot.cuda, slot.platform, self.host,
                                  slot.entry.installed)):
                found.append(self.cell(kernel, slot))
        return tuple(found)

    def per_cell_noarch(self, kernel: Kernel) -> bool:
        """A pure-Python kernel that compiles GPU code when it runs: a wheel per torch x CUDA
        of the matrix, labelled as the cell's, requiring that CUDA major's build of its
        dependencies and proven (import, its own tests) on that torch. One platform's cell
        stands for every platform: the wheel is py3-none-any, and a label's index serves them
        all. False when the matrix has no such cell to plan (then one noarch wheel serves)."""
        spec = kernel.spec
        platforms = self.matrix.platforms
        platform = self.host if self.host in platforms else platforms[0]
        planned = False
        for slot in self.slots(kernel):
            if slot.platform != platform:
                continue
            planned = True
            reason = _kernel_reason(spec, slot.entry.release, slot.cuda) or \
                _index_only(slot.entry) or \
                _build_reason(slot.entry.release, slot.cuda, slot.platform, self.host,
                              slot.entry.installed)
            if reason:
                self.skip(kernel, slot, reason)
                continue
            self.cells.append(self.cell(kernel, slot))
        return planned

    def stable(self, kernel: Kernel) -> None:
        """A stable-ABI kernel: one cell per CUDA major x platform, built against the lowest
        torch of the matrix its cells can be built with (the lowest CUDA minor of that torch),
        whose wheel serves every cell of that CUDA major and platform from that torch on."""
        spec = kernel.spec
        groups: dict[tuple[int, str], list[_Slot]] = {}
        for slot in self.slots(kernel):
            reason = _kernel_reason(spec, slot.entry.release, slot.cuda)
            if reason:
                self.skip(kernel, slot, reason)
                continue
            groups.setdefault((slot.cuda.version.major, slot.platform), []).append(slot)
        no_sm: list[SkippedCell] = []
        for (major, platform), slots in groups.items():
            why: dict[str, str] = {}
            for slot in slots:
                why[slot.id] = _index_only(slot.entry) or _build_reason(
                    slot.entry.release, slot.cuda, slot.platform, self.host,
                    slot.entry.installed, crosses(self.matrix.cross, kernel.kind,
                                                  slot.platform, slot.entry.installed)) or ""
            buildable = [slot for slot in slots if not why[slot.id]]
            if not buildable:
                reasons = "; ".join(dict.fromkeys(why.values()))
                for slot in slots:
                    self.skip(kernel, slot, f"no cell of CUDA {major} on {platform} can build "
                                            f"the stable-ABI wheel that serves it: {reasons}")
                continue
            base = min(buildable, key=lambda slot: (slot.entry.release, slot.cuda.version))
            label = render_label(self.matrix.stable_label, base.entry.release, base.cuda.version)
            self._check_stable_label(label, major)
            cell = self.cell(kernel, base, label)
            reason = _unloadable(cell)
            if reason:
                for slot in slots:
                    self.skip(kernel, slot, reason)
                continue
            reason = _nothing_to_compile(cell)
            if reason:
                no_sm += [SkippedCell(slot.id, reason, kernel.version, slot.entry.release,
                                      slot.cuda.version, slot.label) for slot in slots]
                continue
            self.cells.append(cell)
            self.no_free_threaded(cell, "stable-ABI wheels")
            for slot in slots:
                if slot.entry.release < base.entry.release:
                    self.skip(kernel, slot, f"the stable-ABI wheel for CUDA {major} is built "
                                            f"against torch {base.entry.release}, the lowest "
                                            f"the matrix can build it with ({why[slot.id]})")
                    continue
                self.served.append(ServedCell(slot.id, cell.id, slot.label, kernel.version,
                                              slot.entry.release, slot.cuda.version,
                                              slot.platform))
        self.skipped += no_sm

    def cpu(self, kernel: Kernel) -> None:
        """A CPU cell per torch x platform of the matrix, for a kernel with a CPU backend
        (`cpu:` in the matrix): built against torch from an index, on its own platform."""
        spec, cpu = kernel.spec, self.matrix.cpu
        if cpu is None or "cpu" not in spec.backends:
            return
        for entry in self.matrix.torch:
            label = cpu_label(entry.release)
            for platform in self.matrix.platforms:
                if _excluded(self.matrix, spec.name, entry.release, None, platform,
                             self.used_excludes):
                    continue
                reason = torch_bounds_reason(spec, entry.release) or _index_only(entry) or (
                    "CPU cells are built against torch from an index, not an installed one"
                    if entry.installed is not None else None) or (
                    wrong_host(platform, self.host)
                    if self.host is not None and platform != self.host else None)
                if reason:
                    self.skipped.append(SkippedCell(f"{spec.name}/{label}/{platform}", reason,
                                                    kernel.version, entry.release, None, label,
                                                    cpu=True))
                    continue
                cell = make_cpu_cell(spec, kernel.kind, kernel.source, kernel.version,
                                     entry.release,
                                     platform, cpu.torch_index, self.dependencies,
                                     kernel.entry.tests, facts=kernel.facts)
                self.cells.append(replace(cell, rules=self.rules(kernel, entry.release)))
                self.no_free_threaded(cell, "CPU cells")

    def no_free_threaded(self, cell: Cell, what: str) -> None:
        """The matrix's free-threaded CPythons get no cell beside `cell`: each is skipped,
        saying so (its wheel is abi3, which a free-threaded CPython cannot load)."""
        for python in self.matrix.python:
            if python.free_threaded:
                self.skipped.append(SkippedCell(
                    f"{cell.id}/{python.abi_tag}", f"the factory builds no free-threaded {what} "
                    f"yet, and their abi3 wheel cannot be loaded by {python.describe()}",
                    cell.version, cell.torch, cell.cuda.version if cell.cuda else None,
                    cell.label, cpu=cell.cuda is None))

    def _check_stable_label(self, label: str, major: int) -> None:
        """A stable-ABI label must be a label of its own, and sort below the per-torch labels
        of its CUDA major: pip then prefers a wheel built for exactly the user's torch when
        an index lists both (as it prefers cp312 over abi3)."""
        matrix = self.matrix
        check_label(label, matrix, "stable-label")
        for (_, cuda), other in self.labels.items():
            if cuda.major != major:
                continue
            if other == label:
                problem = f"'{label}', a per-torch cell's label too; it needs one of its own"
            elif not PackagingVersion(f"0+{label}") < PackagingVersion(f"0+{other}"):
                problem = (f"'{label}', which sorts above the per-torch label '{other}': pip "
                           "would take a stable-ABI wheel over one built for exactly that "
                           "torch; begin it with a shorter part (the default is "
                           f"{defaults.STABLE_LABEL_TEMPLATE})")
            else:
                continue
            raise ConfigError(f"the stable-label template gives {problem}", file=matrix.path,
                              line=matrix.stable_label_line, key="stable-label")


def runtime_compiled(spec: KernelSpec, facts: SourceFacts) -> str | None:
    """Why a pure-Python CUDA kernel compiles GPU code when it runs, or None: python-depends
    that do (CuTe DSL, TVM FFI), or a package that imports triton (which torch brings). A
    kernel that also serves other backends stays one wheel for all (its CUDA dependencies
    required where CUDA runs)."""
    if spec.noarch is None or spec.backends != ("cuda",):
        return None
    if spec.runtime_compilers:
        return f"its python-depends {', '.join(spec.runtime_compilers)} compile GPU code"
    if facts.imports_triton:
        return "its package imports triton, which compiles GPU code"
    return None


def _index_only(entry: TorchEntry) -> str | None:
    if entry.index_only:
        return (f"torch {entry.release} is index-only in the matrix: nothing is compiled "
                "against it")
    return None


def _pythons(matrix: Matrix, kernel: Kernel, torch: TorchEntry
             ) -> tuple[list[tuple[CPython | None, bool]], list[tuple[CPython, str]]]:
    """The CPythons a kernel's cells are built with, and whether each wheel serves that one
    only; and the CPythons of the matrix the torch release has no wheels for, each with the
    reason its cell is skipped. A kind built with the torch environment's interpreter is one
    abi3 wheel (kernel-builder); a kind with a CPython of its own (a PEP 517 project) gets a
    cell per CPython of the matrix (by default the factory's own) that the release has, or one
    abi3 cell, built with the oldest of them, where its kind says one serves all. A
    free-threaded CPython of the matrix (3.14t) loads no abi3 module: every kind that can be
    loaded by one gets a cell of its own for it. An installed torch has its interpreter's
    CPython."""
    kind, spec = kernel.kind, kernel.spec
    if torch.installed is not None:
        if not kind.own_python:
            return [(None, False)], []
        python = CPython(Version(torch.installed.python_version))
        # where one wheel serves every CPython, its cell is the same whichever interpreter
        # builds or tests it (a wheel built here is tested beside another machine's torch)
        return [(python, python.free_threaded or not kind.abi3(spec))], []
    served = torch_pythons(matrix, torch.release)
    asked = [python for python in matrix.python if kind.free_threaded or not python.free_threaded]
    if not kind.own_python:  # one abi3 wheel, and a wheel per free-threaded CPython
        asked = [python for python in asked if python.free_threaded]
    elif not asked:
        asked = [CPython(Version(defaults.host_python()))]
    unserved = [python for python in asked if served is not None and str(python) not in served]
    reasons = [(python, _unserved_reason(torch.release, python, served or ()))
               for python in unserved]
    pythons = [python for python in asked if python not in unserved]
    free = [(python, True) for python in pythons if python.free_threaded]
    plain = [python for python in pythons if not python.free_threaded]
    if not kind.own_python:
        return [(None, False), *free], reasons
    if kind.abi3(spec) and plain:
        # one wheel for every CPython with the GIL, built with the oldest
        return [(min(plain), False), *free], \
            [reason for reason in reasons if reason[0].free_threaded]
    return [*((python, True) for python in plain), *free], reasons


def torch_pythons(matrix: Matrix, release: Version) -> tuple[str, ...] | None:
    """The CPythons a torch release has wheels for: as its index listed them when `torch:
    {latest: N}` was resolved, else the factory's table; None when neither knows."""
    for found in matrix.resolved:
        if found.release == release and found.pythons:
            return found.pythons
    known = torch_release(release)
    return known.pythons if known is not None and known.pythons else None


def _unserved_reason(release: Version, python: CPython, served: tuple[str, ...]) -> str:
    plain = [item for item in served if not item.endswith("t")]
    free = [item for item in served if item.endswith("t")]
    return (f"torch {release} has no wheels for {python.describe()} (it has "
            f"{', '.join(plain)}" + (f" and free-threaded {', '.join(free)}" if free else "")
            + ")")


def _platforms(matrix: Matrix, torch: TorchEntry) -> tuple[str, ...]:
    """An installed torch builds for its own machine's platform only."""
    if torch.installed is None:
        return matrix.platforms
    return (defaults.host_platform(),)


def noarch_cell(spec: KernelSpec, kind: KindPlan, source: SourceTree, version: str,
                tests: TestSelection = ALL_TESTS, facts: SourceFacts = NO_FACTS) -> Cell:
    """A pure-Python kernel's one cell: no torch, no CUDA, any platform, no label."""
    return Cell(spec, source, version, None, None, "any", None, (), (), kind, tests=tests,
                facts=facts)


def cpu_label(torch: Version) -> str:
    """The label of a CPU cell: cputorch211."""
    return defaults.CPU_LABEL_TEMPLATE.format(torch=compact(major_minor(torch)))


def make_cpu_cell(spec: KernelSpec, kind: KindPlan, source: SourceTree, version: str,
                  torch: Version,
                  platform: str, torch_index: str | None,
                  dependencies: Mapping[str, Dependency] | None = None,
                  tests: TestSelection = ALL_TESTS, *, facts: SourceFacts) -> Cell:
    """A CPU cell: the [torch] binding and every CPU [kernel.*] section, compiled with the host
    compiler against torch (no CUDA), for one torch release."""
    sections = tuple(SectionPlan(section.name, ()) for section in spec.kernels_for("cpu"))
    return Cell(spec, source, version, torch, None, platform, cpu_label(torch), (), sections,
                kind, None, None, _fetched(spec, dependency_names(spec, None, "cpu"), dependencies),
                tests=tests, cpu_index=torch_index, facts=facts)


def make_cell(spec: KernelSpec, kind: KindPlan, source: SourceTree, version: str,
              torch: Version, cuda: CudaEntry, platform: str, label: str, label_template: str,
              installed: InstalledTorch | None = None,
              dependencies: Mapping[str, Dependency] | None = None,
              python: CPython | None = None, per_python: bool = False,
              env: tuple[tuple[str, str], ...] = (), guard: bool = True,
              compress: CompressMode | None = None,
              tests: TestSelection = ALL_TESTS, *, facts: SourceFacts) -> Cell:
    """A compiled kernel's cell: its SMs and, per [kernel.*] section, the archs it builds, with
    the C++ dependencies of the sections it keeps. The planner makes every cell with it, and so
    does the codec reading a cell's record."""
    sections = _with_called(spec, facts, tuple(_section_plan(section, cuda)
                                               for section in spec.kernels_for("cuda")), cuda)
    kept = {plan.name for plan in sections if not plan.skipped}
    return Cell(
        spec, source, version, torch, cuda, platform, label,
        tuple(with_ptx_for_newest(cuda.sms, cuda.ptx)), sections, kind, label_template,
        installed,
        _fetched(spec, dependency_names(spec, kept), dependencies), python, per_python,
        env, guard, compress, tests, facts=facts,
    )


def _fetched(spec: KernelSpec, names: list[str],
             dependencies: Mapping[str, Dependency] | None) -> tuple[Dependency, ...]:
    """The fetched dependencies of `names`, in their order; each must have been fetched."""
    found = dependencies or {}
    missing = [name for name in names if name not in found]
    if missing:
        raise ConfigError(f"the C++ dependencies {', '.join(missing)} were not fetched for "
                          f"this cell", file=spec.build_toml)
    return tuple(found[name] for name in names)


def dependency_names(spec: KernelSpec, sections: set[str] | None = None,
                     backend: str = "cuda") -> list[str]:
    """The C++ dependencies (with a release the factory fetches) of the kernel's sections of
    `backend`, or of those named in `sections`, in the order they are first named."""
    names: dict[str, None] = {}
    for section in spec.kernels_for(backend):
        if sections is None or section.name in sections:
            names.update((name, None) for name in section.depends
                         if dependency_release(name) is not None)
    return list(names)


def _unloadable(cell: Cell) -> str | None:
    """Why the cell's wheel could not load, if a section it cannot build defines a function
    that a kept source calls."""
    for plan in cell.sections:
        if plan.called and plan.skipped:
            declared = " ".join(str(cap) for cap in plan.dropped)
            return (f"[kernel.{plan.name}] selects no SM of the cell and CUDA "
                    f"{cell.cuda.version if cell.cuda else ''} cannot build its own "
                    f"capabilities ({declared}), but {plan.called}: its wheel could not load")
    return None


def _nothing_to_compile(cell: Cell) -> str | None:
    """Why a cell of a kernel with CUDA sections keeps none of them, if it does not."""
    if not cell.sections or any(not plan.skipped for plan in cell.sections):
        return None
    return "; ".join(f"[kernel.{plan.name}] {plan.skipped}" for plan in cell.sections)


def _with_called(spec: KernelSpec, facts: SourceFacts, plans: tuple[SectionPlan, ...],
                 cuda: CudaEntry) -> tuple[SectionPlan, ...]:
    """The section plans, where a section left out for want of an SM defines a function that
    the binding or a kept section calls, with that section built for its own capabilities
    (or, if the toolkit can build none, marked so that the cell is skipped): leaving it out
    would give a wheel that links but fails to load with an undefined symbol. A section
    brought back this way can call others in turn. A cell that keeps no section on its own
    SMs is left as it is: it has nothing to build (its kernel serves other SMs)."""
    table = facts.symbols
    if table is None or not any(plan.no_sm for plan in plans) or \
            all(plan.skipped for plan in plans):
        return plans
    sections = {section.name: section for section in spec.kernels_for("cuda")}
    callers = list(spec.torch.src if spec.torch else ())
    folders = list(spec.torch.include if spec.torch else ())
    for plan in plans:
        if not plan.skipped:
            callers += sections[plan.name].src
            folders += sections[plan.name].include
    planned = list(plans)
    while True:
        defined: set[str] = set()
        users: dict[str, Path] = {}
        for path in table.reach(callers, folders):
            found = table.symbols(path)
            defined |= found.defines
            for name in found.uses:
                users.setdefault(name, path)
        changed = False
        for index, plan in enumerate(planned):
            if not plan.no_sm or plan.called:
                continue
            section = sections[plan.name]
            own: set[str] = set()
            for name in section.src:
                if PurePosixPath(name).suffix.lower() not in HEADER_SUFFIXES:
                    own |= table.defines(name)
            called = sorted(name for name in own - defined if base_name(name) in users)
            if not called:
                continue
            caller = users[base_name(called[0])].relative_to(table.root).as_posix()
            more = f" (and {len(called) - 1} more)" if len(called) > 1 else ""
            note = f"{caller} calls {called[0]}{more}, which only it defines"
            archs = tuple(_buildable(section, cuda))
            planned[index] = SectionPlan(plan.name, archs, None if archs else plan.skipped,
                                       plan.dropped, True, note)
            callers += section.src
            folders += section.include
            changed = True
        if not changed:
            return tuple(planned)


def check_unique_names(matrix: Matrix, kernels: list[Kernel]) -> None:
    seen: dict[str, KernelEntry] = {}
    for kernel in kernels:
        name = kernel.spec.name
        if name in seen:
            raise ConfigError(f"kernel '{name}' is listed twice (also at line {seen[name].line})",
                              file=matrix.path, line=kernel.entry.line, key="kernels")
        seen[name] = kernel.entry


def _excluded(matrix: Matrix, kernel: str, torch: Version | None, cuda: Version | None,
              platform: str, used: set[int]) -> bool:
    hit = False
    torch_mm = major_minor(torch) if torch else None
    cuda_mm = major_minor(cuda) if cuda else None
    for index, exclude in enumerate(matrix.excludes):
        if exclude.matches(kernel, torch_mm, cuda_mm, platform):
            used.add(index)
            hit = True
    return hit


def skip_reason(spec: KernelSpec, kind: KindPlan, torch: Version, cuda: CudaEntry,
                platform: str, host: str | None, installed: InstalledTorch | None = None,
                cross: bool = False) -> str | None:
    """Why this cell cannot be built, where that is the kernel's or the matrix's own choice
    (`cross`: the matrix cross-compiles cells of this platform where it can)."""
    return _kernel_reason(spec, torch, cuda) or \
        _build_reason(torch, cuda, platform, host, installed, crosses(cross, kind, platform,
                                                                      installed))


def crosses(cross: bool, kind: KindPlan, platform: str,
            installed: InstalledTorch | None) -> bool:
    """Whether a cell of `platform` is cross-compiled on a machine of another: with `cross:
    true`, the cells of a platform in defaults.CROSS_BUILT of a kind the factory's compilers
    build (a setup.py project's build runs its own), against a torch from an index (an
    installed torch is its own machine's)."""
    return cross and platform in defaults.CROSS_BUILT and installed is None and \
        kind.cross_compiles


def _kernel_reason(spec: KernelSpec, torch: Version, cuda: CudaEntry) -> str | None:
    """Why the kernel has no wheel for this torch and CUDA, built or served."""
    if "cuda" not in spec.backends:
        return f"the kernel has no CUDA backend (backends: {', '.join(spec.backends)})"
    return torch_bounds_reason(spec, torch) or cuda_bounds_reason(spec, cuda.version) or \
        stable_abi_reason(spec, torch)


def torch_bounds_reason(spec: KernelSpec, torch: Version) -> str | None:
    """Why the kernel's torch minver/maxver rule this torch out, or None."""
    bounds = spec.torch
    torch_mm = major_minor(torch)
    if bounds and bounds.minver and torch_mm < major_minor(bounds.minver):
        return f"torch {torch_mm} is below the kernel's torch minver {bounds.minver}"
    if bounds and bounds.maxver and torch_mm > major_minor(bounds.maxver):
        return f"torch {torch_mm} is above the kernel's torch maxver {bounds.maxver}"
    return None


def cuda_bounds_reason(spec: KernelSpec, cuda: Version) -> str | None:
    """Why the kernel's CUDA minver/maxver rule this CUDA version out, or None."""
    cuda_mm = major_minor(cuda)
    if spec.cuda_minver and cuda_mm < major_minor(spec.cuda_minver):
        return f"CUDA {cuda_mm} is below the kernel's CUDA minver {spec.cuda_minver}"
    if spec.cuda_maxver and cuda_mm > major_minor(spec.cuda_maxver):
        return f"CUDA {cuda_mm} is above the kernel's CUDA maxver {spec.cuda_maxver}"
    return None


def stable_abi_reason(spec: KernelSpec, torch: Version) -> str | None:
    """Why a torch older than the stable ABI the kernel targets has no wheel, or None."""
    stable = spec.torch.stable_abi_for("cuda") if spec.torch else None
    torch_mm = major_minor(torch)
    if stable and torch_mm < major_minor(stable):
        return f"the kernel targets torch's stable ABI {stable}, newer than torch {torch_mm}"
    return None


def _build_reason(torch: Version, cuda: CudaEntry, platform: str, host: str | None,
                  installed: InstalledTorch | None, cross: bool = False) -> str | None:
    """Why this machine (or, with no host, any machine) cannot compile against this torch."""
    cuda_mm = major_minor(cuda.version)
    release = torch_release(torch)
    if installed is None and cuda.torch_index is None and release and \
            major_minor(release.pypi_cuda) != cuda_mm:
        return (f"torch {major_minor(torch)} on PyPI is a CUDA {release.pypi_cuda} build, not "
                f"CUDA {cuda_mm}; set cuda.\"{cuda_mm}\".torch-index in the matrix to build it "
                f"(e.g. https://download.pytorch.org/whl/cu{compact(cuda_mm)})")
    if host is not None and platform != host and \
            not (cross and defaults.CROSS_BUILT.get(platform) == host):
        return wrong_host(platform, host)
    return None


def _section_plan(section: KernelSection, cuda: CudaEntry) -> SectionPlan:
    if section.cuda_minver and cuda.version < section.cuda_minver:
        return SectionPlan(section.name, (),
                           skipped=f"CUDA {cuda.version} is below its cuda-minver "
                                   f"{section.cuda_minver}")
    if section.cuda_capabilities is None:
        return SectionPlan(section.name, tuple(with_ptx_for_newest(cuda.sms, cuda.ptx)))
    buildable = _buildable(section, cuda)
    dropped = tuple(cap for cap in section.cuda_capabilities
                    if cap.is_known and cap not in buildable)
    archs = loose_intersection(buildable, cuda.sms)
    if not archs:
        declared = " ".join(str(cap) for cap in section.cuda_capabilities)
        targets = " ".join(str(sm) for sm in cuda.sms)
        return SectionPlan(section.name, (), skipped=f"its cuda-capabilities ({declared}) "
                           f"select no SM of the cell ({targets})", dropped=dropped, no_sm=True)
    return SectionPlan(section.name, tuple(archs), dropped=dropped)


def _buildable(section: KernelSection, cuda: CudaEntry) -> list[Capability]:
    """The section's declared capabilities that this CUDA toolkit can compile for."""
    policy = cuda_policy(cuda.version)
    return [cap for cap in section.cuda_capabilities or ()
            if cap.is_known and policy is not None
            and check_supported(cap, policy, cuda.version) is None]
