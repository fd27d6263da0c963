"""The frozen form of matrix.yaml."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from .. import defaults
from ..values.pythons import CPython
from ..values.units import human_size, parse_size
from ..values.versions import Version
from .publisher import Publisher
from .rules import ToolchainRule, shipped_rules
from .spec import ProjectKind
from .torches import InstalledTorch

__all__ = ["ALL_TESTS", "CLASH_POLICIES", "COMPRESS_MODES", "DEPENDENCY_KINDS", "PLATFORMS",
           "RUNNERS", "SITE_PRESETS", "SIZE_PRESETS", "SOURCE_KINDS", "ClashPolicy",
           "CompressMode", "CudaEntry", "DependencyEntry", "DependencyKind", "Exclude",
           "FollowCuda", "KernelEntry", "LatestTorch", "Matrix", "NameCheck", "ResolvedTorch",
           "RunnerChoice", "SizeLimit", "SourceKind", "SourceRequest", "TestSelection",
           "TorchEntry", "distribution_name", "is_project_name", "parse_size_limit"]

SourceKind = Literal["path", "git", "hub"]
DependencyKind = Literal["pypi", "git", "path", "wheel"]
DEPENDENCY_KINDS: tuple[str, ...] = get_args(DependencyKind)
RunnerChoice = Literal["local", "docker", "auto"]
Platform = Literal["x86_64", "aarch64"]
PLATFORMS: tuple[str, ...] = get_args(Platform)
SOURCE_KINDS: tuple[str, ...] = get_args(SourceKind)
RUNNERS: tuple[str, ...] = get_args(RunnerChoice)
# How nvcc compresses the GPU code it embeds (compile/commands.py compression_flags).
CompressMode = Literal["size", "balance", "speed", "none"]
COMPRESS_MODES: tuple[str, ...] = get_args(CompressMode)
# What a kernel named like a project of the public index gets (name-clash: in matrix.yaml).
ClashPolicy = Literal["warn", "refuse", "ignore"]
CLASH_POLICIES: tuple[str, ...] = get_args(ClashPolicy)


_PROJECT_NAME = re.compile(r"[A-Z0-9]([A-Z0-9._-]*[A-Z0-9])?", re.IGNORECASE)


def distribution_name(template: str | None, name: str) -> str:
    """A kernel's distribution name: the dist-name template with {name} the kernel's own
    (kwf-{name} gives kwf-img2gray); the kernel's name without one."""
    return name if template is None else template.format(name=name)


def is_project_name(text: str) -> bool:
    """A valid distribution name (the core metadata's Name rule)."""
    return _PROJECT_NAME.fullmatch(text) is not None


@dataclass(frozen=True)
class NameCheck:
    """name-clash: how `factory plan` and `factory publish` treat a distribution name that the
    public index (PyPI, or the index given) also has: pip given --extra-index-url takes the
    higher version from either index, so one of the two wheels shadows the other."""

    policy: ClashPolicy = "warn"
    index: str | None = None  # None: $KERNEL_WHEEL_FACTORY_NAME_INDEX, else PyPI's
    line: int | None = None


@dataclass(frozen=True)
class SizeLimit:
    """The most bytes a file may have, and the name it was given by (pypi, 100M)."""

    bytes: int
    name: str

    def describe(self) -> str:
        if self.name in SIZE_PRESETS or self.name in SITE_PRESETS:
            return f"{self.name}'s limit of {human_size(self.bytes)}"
        return f"the limit of {human_size(self.bytes)}"


# Hosts' published limits per file: PyPI refuses uploads over 100 MiB unless a project is
# granted more; a GitHub release asset must be under 2 GiB.
SIZE_PRESETS = {"pypi": 100 << 20, "github-release": 2 << 30}
# ... and per published static site: GitHub Pages' 1 GB (read as 10**9, the smaller reading).
SITE_PRESETS = {"github-pages": 10**9}


def parse_size_limit(text: str, presets: dict[str, int] = SIZE_PRESETS) -> SizeLimit:
    """One of `presets` (pypi, github-release), or a size: 100M, 1.5GiB, 250000000."""
    text = text.strip()
    if text in presets:
        return SizeLimit(presets[text], text)
    try:
        return SizeLimit(parse_size(text), text)
    except ValueError as exc:
        raise ValueError(f"{exc}, or one of {', '.join(presets)}") from None


@dataclass(frozen=True)
class SourceRequest:
    """Where a kernel's source comes from, as matrix.yaml asks for it."""

    kind: SourceKind
    location: str  # the folder, URL or repo id as written (the lock file's key)
    revision: str | None = None  # git rev / hub revision as written; None for folders
    subdir: str | None = None  # the kernel's folder inside the repo (posix, relative)
    folder: Path | None = None  # path kind: the folder; git kind: a local repo's absolute path

    @property
    def identity(self) -> tuple[str, str, str]:
        """What names a source across matrix.yaml and matrix.lock."""
        return (self.kind, self.location, self.subdir or "")

    def describe(self) -> str:
        where = f"{self.kind}:{self.location}"
        if self.subdir:
            where += f" ({self.subdir})"
        return where + (f" @ {self.revision}" if self.revision else "")


@dataclass(frozen=True)
class TestSelection:
    """Which of a kernel's own tests prove its wheel, and for how long they may run: all of
    tests/, or the files and pytest node ids in `paths` (relative to tests/), narrowed by a
    pytest -k `keyword` expression. Suites such as flash-attention's run for hours in full:
    where the matrix chooses none, the tests marked kernels_ci run, else every test function
    once and then more cases until the budget is spent; a `budget` given bounds the matrix's
    choice the same way (None: the default budget, for the default choice only). `requires` are
    what the tests need
    besides torch, pytest and what flake.nix names; `without` the names left out of those.
    `required`: a wheel whose tests could not run is not published (None: as the run says)."""

    __test__ = False  # not a test class, whatever pytest's collector thinks of the name

    paths: tuple[str, ...] = ()
    keyword: str | None = None
    timeout: float = defaults.TEST_TIMEOUT
    requires: tuple[str, ...] = ()
    budget: float | None = None
    without: tuple[str, ...] = ()
    required: bool | None = None

    @property
    def chosen(self) -> bool:
        """Whether matrix.yaml chose the tests (the default choice is then off)."""
        return bool(self.paths or self.keyword)

    @property
    def spending(self) -> float | None:
        """The seconds the cases may take, once each test function has run: the budget given,
        else the default budget for the default choice, else none (the chosen tests run
        whole)."""
        if self.budget is not None:
            return self.budget
        return None if self.chosen else defaults.TEST_BUDGET

    def pytest_args(self) -> list[str]:
        """pytest's arguments, run from the folder that holds the copy of tests/."""
        keyword = ["-k", self.keyword] if self.keyword else []
        return [*keyword, *(f"tests/{path}" for path in self.paths or ("",))]

    def describe(self) -> str:
        """'' for the whole suite, else what was chosen, e.g. test_a.py::test_b -k 'not slow'."""
        keyword = [f"-k {shlex.quote(self.keyword)}"] if self.keyword else []
        return " ".join([*self.paths, *keyword])

    def to_json(self) -> dict[str, Any]:
        return {"paths": list(self.paths), "keyword": self.keyword, "timeout": self.timeout,
                "requires": list(self.requires), "budget": self.budget,
                "without": list(self.without), "required": self.required}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TestSelection:
        required = data.get("required")
        return cls(tuple(map(str, data["paths"])),
                   None if data["keyword"] is None else str(data["keyword"]),
                   float(data["timeout"]), tuple(map(str, data["requires"])),
                   None if data.get("budget") is None else float(data["budget"]),
                   tuple(map(str, data.get("without", ()))),
                   None if required is None else bool(required))


ALL_TESTS = TestSelection()


@dataclass(frozen=True)
class KernelEntry:
    """One kernel to build: where its source is and the wheel version to give it."""

    source: SourceRequest
    version: str | None  # None: from a vX.Y.Z tag on the resolved commit
    line: int | None
    index: int = 0  # its position in the kernels list (kernels[index] in errors)
    kind: ProjectKind | None = None  # as stated; None: found from the files
    env: tuple[tuple[str, str], ...] = ()  # variables its build reads (FORCE_BUILD=TRUE, ...)
    guard: bool = True  # a PEP 517 project's packages get the factory's import guard
    compress: CompressMode | None = None  # its GPU code's compression; None: the matrix's
    tests: TestSelection = ALL_TESTS  # which of its own tests prove a wheel
    dist_name: str | None = None  # its distribution's name template; None: the matrix's
    rules: tuple[ToolchainRule, ...] | None = None  # its toolchain rules; None: the matrix's
    # its extension modules need the GIL: a free-threaded interpreter that loads them turns it
    # back on, which the import gate then accepts (and the log and the browse page say)
    needs_gil: bool = False

    @property
    def key(self) -> str:
        return f"kernels[{self.index}]"


@dataclass(frozen=True)
class LatestTorch:
    """torch: {latest: N}: the N newest torch releases a package index lists, resolved by
    `factory lock` (and by a build that is neither --locked nor --offline)."""

    count: int
    pre: bool  # release candidates count
    index: str  # a simple index (PyPI's by default)
    line: int | None


@dataclass(frozen=True)
class FollowCuda:
    """cuda: {follow: torch}: the CUDA version of each torch's build on its index, for that
    torch only."""

    sms: tuple[Version, ...] | None  # None: each CUDA version's default list
    ptx: bool
    line: int | None


@dataclass(frozen=True)
class ResolvedTorch:
    """A torch release as the index lists it: its newest version and the CUDA it is built
    with."""

    release: Version  # major.minor
    version: str  # 2.15.1
    cuda: Version  # major.minor
    pythons: tuple[str, ...] = ()  # the CPythons it has Linux wheels for (3.14t: free-threaded)


@dataclass(frozen=True)
class TorchEntry:
    """One torch of the matrix: a release, installed from a package index into an environment
    the factory makes, or a torch already installed, in an interpreter of this machine
    (`python`) or of a container image (`image`), used as it is."""

    version: Version | None  # major.minor; for an installed torch, known once it is read
    python: str | None = None
    image: str | None = None
    line: int | None = None
    key: str = "torch"  # where it was given, for messages: torch[1], --torch-python
    installed: InstalledTorch | None = None  # what the interpreter holds, once read
    index_only: bool = False  # its indexes are served; nothing is compiled against it

    @property
    def release(self) -> Version:
        """torch's major.minor (an installed torch must have been read)."""
        if self.installed is not None:
            return self.installed.release
        assert self.version is not None, f"{self.key} has not been read"
        return self.version

    def describe(self) -> str:
        if self.installed is not None:
            return self.installed.describe()
        if self.image is not None:
            return f"the torch of {self.image}"
        if self.python is not None:
            return f"the torch of {self.python}"
        return f"torch {self.version}" + (" (index-only)" if self.index_only else "")


@dataclass(frozen=True)
class CudaEntry:
    """One CUDA version of the matrix and how to get its toolkit and torch builds."""

    version: Version
    sms: tuple[Version, ...]
    ptx: bool
    home: Path | None  # an installed toolkit to use instead of PyPI's
    torch_index: str | None  # where torch builds for this CUDA version come from
    line: int | None


@dataclass(frozen=True)
class CpuEntry:
    """The matrix's CPU cells (`cpu:`): kernels with a CPU backend get one per torch."""

    torch_index: str | None  # where torch comes from (a CPU build's index); None: PyPI's
    line: int | None


@dataclass(frozen=True)
class DependencyEntry:
    """Where matrix.yaml takes one C++ dependency (`depends: {cutlass_4_0: {git: ...}}`) from,
    instead of its default origin."""

    name: str  # the build.toml name: cutlass_4_0
    kind: DependencyKind
    location: str  # as written: the URL, folder or wheel file
    rev: str | None = None  # git: the rev (default: the release tag)
    folder: Path | None = None  # a local folder, git repository or wheel file, resolved
    line: int | None = None


@dataclass(frozen=True)
class Exclude:
    kernel: str | None
    torch: Version | None
    cuda: Version | None
    platform: str | None
    line: int | None

    def matches(self, kernel: str, torch: Version | None, cuda: Version | None,
                platform: str) -> bool:
        return ((self.kernel is None or self.kernel == kernel)
                and (self.torch is None or self.torch == torch)
                and (self.cuda is None or self.cuda == cuda)
                and (self.platform is None or self.platform == platform))


@dataclass(frozen=True)
class Matrix:
    path: Path
    kernels: tuple[KernelEntry, ...]
    torch: tuple[TorchEntry, ...]
    cuda: tuple[CudaEntry, ...]
    platforms: tuple[str, ...]
    label: str
    label_line: int | None
    excludes: tuple[Exclude, ...]
    runner: RunnerChoice | None = None  # None: the command line's choice
    docker_base: str | None = None  # the builder images' base, "{arch}" standing for the platform
    depends: tuple[DependencyEntry, ...] = ()  # C++ dependencies taken from elsewhere
    python: tuple[CPython, ...] = ()  # CPythons of per-Python wheels; () = the factory's own
    stable_label: str = defaults.STABLE_LABEL_TEMPLATE  # the stable-ABI wheels' labels
    stable_label_line: int | None = None
    compress: CompressMode = defaults.COMPRESS  # how the GPU code of every kernel is compressed
    max_wheel_size: SizeLimit | None = None  # the size gate's limit per wheel
    costs: Path | None = None  # a cost book that travels with the matrix (read, never written)
    torch_latest: LatestTorch | None = None  # torch: {latest: N}, until resolved
    cuda_follow: FollowCuda | None = None  # cuda: {follow: torch}
    resolved: tuple[ResolvedTorch, ...] = ()  # what torch: {latest: N} was resolved to
    dist_name: str | None = None  # the distributions' name template ({name}); None: the kernel's
    name_clash: NameCheck = NameCheck()
    # also publish each compiled wheel as a PEP 825 variant wheel (index/variants.py)
    variants: bool = False
    # build aarch64 cells on x86_64 machines, cross-compiled (toolchain/emulated.py)
    cross: bool = False
    cpu: CpuEntry | None = None  # build kernels' CPU backends too, a cell per torch
    # folders of wheels the kernels' test environments may be installed from
    wheelhouses: tuple[Path, ...] = ()
    wheelhouse_line: int | None = None
    object_store: str | None = None  # the remote object store's URL (no password)
    publisher: Publisher | None = None  # whose CI identity signs the attestations (PEP 740)
    # the toolchain rules of a kernel without its own: data/rules.toml as the matrix changes it
    rules: tuple[ToolchainRule, ...] = field(default_factory=shipped_rules)

    def dependency(self, name: str) -> DependencyEntry | None:
        return next((entry for entry in self.depends if entry.name == name), None)
