"""Read and validate matrix.yaml: every error names the file, the line and the key."""

from __future__ import annotations

import os
import re
import shutil
import string
from dataclasses import replace
from pathlib import Path, PurePosixPath
from typing import cast

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion

from .. import defaults
from ..errors import ConfigError
from ..policy import (
    CudaPolicy,
    cuda_policies,
    cuda_policy,
    cuda_releases,
    dependency_release,
    dependency_releases,
    known_sms,
    torch_release,
    torch_releases,
)
from ..policy.capabilities import Capability, check_supported
from ..trust.credentials import refuse_credentials
from ..trust.safety import leaves_root
from ..values.pythons import CPython
from ..values.units import parse_duration
from ..values.versions import Version, major_minor, parse_release
from .model import (
    ALL_TESTS,
    CLASH_POLICIES,
    COMPRESS_MODES,
    DEPENDENCY_KINDS,
    PLATFORMS,
    RUNNERS,
    ClashPolicy,
    CompressMode,
    CpuEntry,
    CudaEntry,
    DependencyEntry,
    DependencyKind,
    Exclude,
    FollowCuda,
    KernelEntry,
    LatestTorch,
    Matrix,
    NameCheck,
    ResolvedTorch,
    RunnerChoice,
    SizeLimit,
    SourceKind,
    SourceRequest,
    TestSelection,
    TorchEntry,
    distribution_name,
    is_project_name,
    parse_size_limit,
)
from .nodes import Node, load_yaml
from .project import project_kind
from .rules import ToolchainRule, apply_rule_entries, shipped_rules
from .spec import PROJECT_KINDS, ProjectKind
from .wheelhouse import wheelhouse_problem

__all__ = ["LABEL_FIELDS", "STABLE_LABEL_FIELDS", "load_matrix", "with_resolved_torches"]

LABEL_FIELDS = ("cuda", "torch", "cuda_major", "cuda_minor", "torch_major", "torch_minor")
# A stable-ABI wheel's label names the torch it was built against and its CUDA major only.
STABLE_LABEL_FIELDS = ("torch", "cuda_major", "torch_major", "torch_minor")
_LOCAL_LABEL = re.compile(r"[a-z0-9]+(\.[a-z0-9]+)*")


def load_matrix(path: Path, torch_pythons: list[Path] | None = None,
                filling: bool = False) -> Matrix:
    """The matrix at `path`; `torch_pythons` (--torch-python) replace its torch list with the
    torches of those interpreters. `filling`: its wheelhouses are being filled (`factory
    wheelhouse`), so they need not hold wheels yet."""
    top = _top_table(load_yaml(path))
    base = path.parent
    latest = _latest(top["torch"]) if isinstance(top["torch"].value, dict) and \
        "latest" in top["torch"].value and not torch_pythons else None
    follow = _follow(top["cuda"]) if isinstance(top["cuda"].value, dict) and \
        "follow" in top["cuda"].value else None
    if follow is not None and torch_pythons:
        raise ConfigError("cuda: {follow: torch} takes the CUDA versions of torch releases; "
                          "with --torch-python list the CUDA versions", key="--torch-python")
    tests = _tests(top["tests"], ALL_TESTS, every_kernel=True) if "tests" in top else ALL_TESTS
    rules = (apply_rule_entries(shipped_rules(), top["toolchain-rules"])
             if "toolchain-rules" in top else shipped_rules())
    matrix = Matrix(
        path=path,
        kernels=_kernels(top["kernels"], base, tests, rules),
        torch=(_command_line_torches(torch_pythons) if torch_pythons
               else () if latest else _torch_entries(top["torch"], base)),
        cuda=() if follow else _cuda_entries(top["cuda"], base),
        platforms=_platforms(top.get("platforms")),
        label=top["label"].nonempty_str() if "label" in top else defaults.LABEL_TEMPLATE,
        label_line=top["label"].line if "label" in top else None,
        excludes=_excludes(top.get("exclude")),
        runner=_runner(top["runner"]) if "runner" in top else None,
        docker_base=_docker(top["docker"]) if "docker" in top else None,
        depends=_depends(top["depends"], base) if "depends" in top else (),
        python=_pythons(top["python"]) if "python" in top else (),
        stable_label=(top["stable-label"].nonempty_str() if "stable-label" in top
                      else defaults.STABLE_LABEL_TEMPLATE),
        stable_label_line=top["stable-label"].line if "stable-label" in top else None,
        compress=_compress(top["compress"]) if "compress" in top else defaults.COMPRESS,
        max_wheel_size=(_size_limit(top["max-wheel-size"]) if "max-wheel-size" in top
                        else None),
        costs=_costs_folder(top["costs"], base) if "costs" in top else None,
        torch_latest=latest, cuda_follow=follow,
        dist_name=_dist_name(top["dist-name"]) if "dist-name" in top else None,
        name_clash=_name_check(top["name-clash"]) if "name-clash" in top else NameCheck(),
        variants=top["variants"].bool() if "variants" in top else False,
        cross=top["cross"].bool() if "cross" in top else False,
        cpu=_cpu(top["cpu"]) if "cpu" in top else None,
        wheelhouses=_wheelhouses(top["wheelhouse"], base, filling) if "wheelhouse" in top else (),
        wheelhouse_line=top["wheelhouse"].line if "wheelhouse" in top else None,
        rules=rules,
    )
    if follow is not None and latest is None:
        matrix = with_resolved_torches(matrix, _known_builds(matrix, top["cuda"]))
    if "label" in top:
        _check_label_template(top["label"])
    if "stable-label" in top:
        _check_label_template(top["stable-label"], STABLE_LABEL_FIELDS)
    return matrix


def _top_table(root: Node) -> dict[str, Node]:
    """The matrix's settings: a table of known keys, the three required ones there."""
    if not isinstance(root.value, dict):
        raise root.error("expected a table of settings at the top of the file")
    return root.table(["kernels", "torch", "cuda", "python", "platforms", "label",
                       "stable-label", "exclude", "runner", "docker", "depends", "compress",
                       "max-wheel-size", "costs", "dist-name", "name-clash", "variants", "cross",
                       "cpu", "tests", "wheelhouse", "toolchain-rules"],
                      required=["kernels", "torch", "cuda"])


def _nonempty_list(node: Node) -> list[Node]:
    items = node.list()
    if not items:
        raise node.error("must not be empty")
    return items


_ENTRY_KEYS = ("version", "kind", "env", "guard", "compress", "tests", "dist-name",
               "toolchain-rules", "needs-gil")
_KERNEL_KEYS: dict[SourceKind, tuple[str, ...]] = {
    "path": ("path", *_ENTRY_KEYS),
    "git": ("git", "rev", "subdir", *_ENTRY_KEYS),
    "hub": ("hub", "revision", "subdir", *_ENTRY_KEYS),
}
_HUB_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")
_GIT_URL = re.compile(r"(https?|ssh|git|file)://\S+|[A-Za-z0-9_.-]+@[A-Za-z0-9_.-]+:\S+")
_REV = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./+@-]*")


def _kernels(node: Node, base: Path, tests: TestSelection,
             rules: tuple[ToolchainRule, ...]) -> tuple[KernelEntry, ...]:
    entries = []
    for index, item in enumerate(_nonempty_list(node)):
        if not isinstance(item.value, dict):
            raise item.error("expected a table with one of path:, git: or hub:")
        kinds = [kind for kind in _KERNEL_KEYS if kind in item.value]
        if len(kinds) != 1:
            raise item.error("give exactly one of path: (a folder), git: (a repository URL) or "
                             "hub: (a Hugging Face repo id)"
                             + (f", not {' and '.join(kinds)}" if kinds else ""))
        kind = kinds[0]
        allowed = _KERNEL_KEYS[kind]
        for name, child in item.mapping().items():
            if name not in allowed and any(name in keys for keys in _KERNEL_KEYS.values()):
                owners = [k for k, keys in _KERNEL_KEYS.items() if name in keys]
                raise child.error(f"'{name}' belongs to {' and '.join(owners)} sources; a {kind} "
                                  f"source takes {', '.join(allowed[1:])}")
        fields = item.table(allowed, required=[kind])
        stated = _project_kind(fields["kind"]) if "kind" in fields else None
        source = {"path": _path_source, "git": _git_source, "hub": _hub_source}[kind](
            fields, base, stated)
        version = _wheel_version(fields["version"]) if "version" in fields else None
        env = _build_env(fields["env"]) if "env" in fields else ()
        guard = fields["guard"].bool() if "guard" in fields else True
        if not guard and stated == "kernel-builder":
            raise fields["guard"].error("a kernel-builder kernel's wheel always has its import "
                                        "guard; guard: false is for PEP 517 projects")
        compress = _compress(fields["compress"]) if "compress" in fields else None
        chosen = _tests(fields["tests"], tests) if "tests" in fields else tests
        dist_name = _dist_name(fields["dist-name"]) if "dist-name" in fields else None
        own = (apply_rule_entries(rules, fields["toolchain-rules"])
               if "toolchain-rules" in fields else None)
        needs_gil = fields["needs-gil"].bool() if "needs-gil" in fields else False
        entries.append(KernelEntry(source, version, item.line, index, stated, env, guard,
                                   compress, chosen, dist_name, own, needs_gil))
    return tuple(entries)


def _dist_name(node: Node) -> str:
    """dist-name: a distribution name, or a template of one with {name} standing for the
    kernel's (kwf-{name}); it names the wheel, never the package it imports."""
    template = node.nonempty_str()
    if any(name != "name" or spec or conversion
           for name, spec, conversion in _placeholders(node, template, "name")):
        raise node.error("the only placeholder is {name}, the kernel's own name "
                         "(e.g. kwf-{name})")
    if not is_project_name(distribution_name(template, "a")):
        raise node.error(f"'{template}' does not give a distribution name: letters, digits, "
                         "'.', '_' and '-', starting and ending with a letter or digit")
    return template


def _name_check(node: Node) -> NameCheck:
    """name-clash: warn | refuse | ignore, or {policy: ..., index: URL}."""
    if not isinstance(node.value, dict):
        return NameCheck(cast(ClashPolicy, _choice(node, CLASH_POLICIES, "name-clash policy")),
                         None, node.line)
    fields = node.table(["policy", "index"])
    policy = cast(ClashPolicy, _choice(fields["policy"], CLASH_POLICIES, "name-clash policy")) \
        if "policy" in fields else NameCheck.policy
    index = _index_url(fields["index"]) if "index" in fields else None
    return NameCheck(policy, index, node.line)


def _index_url(node: Node, files: bool = False,
               advice: str = "a netrc file gives them to the factory") -> str:
    """A simple index's URL (`files`: or a file:// one), without credentials (`advice` says
    where they go instead)."""
    index = node.nonempty_str()
    _refuse_credentials(node, index, advice)
    if not re.match(r"(https?|file)://" if files else r"https?://", index):
        schemes = "http://, https:// or file://" if files else "http:// or https://"
        raise node.error(f"'{index}' is not an index URL ({schemes})")
    return index


_KEYWORD_LIMIT = 1000  # characters of a -k expression: a handful of names and operators
_TEST_KEYS = ("paths", "keyword", "timeout", "budget", "requires", "without", "required")
# What the matrix's own tests: table sets for every kernel; which tests, only a kernel's.
_EVERY_KERNEL_TEST_KEYS = ("timeout", "budget", "requires", "without", "required")


def _tests(node: Node, inherited: TestSelection, every_kernel: bool = False) -> TestSelection:
    """tests: {paths: [...], keyword: EXPR, timeout: 30m, budget: 10m, requires: [...],
    without: [...], required: BOOL}: which of the kernel's own tests prove its wheels, for how
    long they may run, what they need and whether a wheel they could not prove is published.
    At the top of the matrix it sets what every kernel's tests get (`inherited` then); a
    kernel's own keys win."""
    if not isinstance(node.value, dict):
        raise node.error("expected a table, e.g.  tests: {paths: [test_ops.py], keyword: "
                         "\"not slow\", timeout: 30m}")
    keys = _EVERY_KERNEL_TEST_KEYS if every_kernel else _TEST_KEYS
    for name, child in node.mapping().items():
        if name in _TEST_KEYS and name not in keys:
            raise child.error(f"'{name}' chooses one kernel's tests: give it in that kernel's "
                              "tests: table")
    fields = node.table(keys)
    paths = tuple(_test_path(item) for item in _nonempty_list(fields["paths"])) \
        if "paths" in fields else inherited.paths
    keyword = inherited.keyword
    if "keyword" in fields:
        keyword = fields["keyword"].nonempty_str()
        if not keyword.isprintable():
            raise fields["keyword"].error("the expression must be one line of printable text")
        if len(keyword) > _KEYWORD_LIMIT:
            raise fields["keyword"].error(f"is {len(keyword):,} characters long; a pytest -k "
                                          f"expression of at most {_KEYWORD_LIMIT:,} is taken")
    requires = tuple(_test_requirement(item) for item in _nonempty_list(fields["requires"])) \
        if "requires" in fields else inherited.requires
    without = tuple(_project_name(item) for item in _nonempty_list(fields["without"])) \
        if "without" in fields else inherited.without
    return TestSelection(
        paths, keyword, _test_duration(fields, "timeout", inherited.timeout), requires,
        _test_duration(fields, "budget", inherited.budget) if "budget" in fields
        else inherited.budget, without,
        fields["required"].bool() if "required" in fields else inherited.required)


def _test_duration(fields: dict[str, Node], key: str, inherited: float | None) -> float:
    if key not in fields:
        assert inherited is not None
        return inherited
    try:
        return parse_duration(fields[key].scalar_text())
    except ValueError as exc:
        raise fields[key].error(str(exc)) from None


def _project_name(node: Node) -> str:
    """A project's name, as a requirement names it (transformers, py-cpuinfo)."""
    text = node.nonempty_str()
    if not is_project_name(text):
        raise node.error(f"'{text}' is not a project name (give the name alone, e.g. numpy)")
    return text


def _wheelhouses(node: Node, base: Path, filling: bool) -> tuple[Path, ...]:
    """wheelhouse: DIR or [DIR, ...]: folders of wheels the test environments may be installed
    from (relative to the matrix), each checked now (unless being `filling`)."""
    items = _nonempty_list(node) if isinstance(node.value, list) else [node]
    folders = []
    for item in items:
        text = item.nonempty_str()
        folder = _local_folder(item, text, base)
        problem = None if filling and not folder.exists() else wheelhouse_problem(folder)
        if problem is not None and not (filling and problem.startswith("holds no wheel")):
            raise item.error(f"wheelhouse '{text}' {problem}")
        folders.append(folder)
    return tuple(dict.fromkeys(folders))


def _test_requirement(node: Node) -> str:
    """A project on the index the tests are installed from (einops, numpy>=2)."""
    text = node.nonempty_str()
    try:
        requirement = Requirement(text)
    except InvalidRequirement as exc:
        raise node.error(f"'{text}' is not a requirement ({exc})") from None
    if requirement.url:
        raise node.error("name a project on the index, not a URL: the tests' environment is "
                         "installed from the index the torch comes from")
    return text


def _test_path(node: Node) -> str:
    """A file, folder or pytest node id inside the kernel's tests/ (test_a.py::test_b[x])."""
    text = node.nonempty_str()
    where = PurePosixPath(text.split("::", 1)[0])
    if not text.isprintable() or text.startswith("-") or "\\" in text:
        raise node.error(f"'{text}' is not a path or pytest node id inside tests/")
    if where.is_absolute() or ".." in where.parts:
        raise node.error(f"'{text}' must be a path inside the kernel's tests/ folder, "
                         "relative to it")
    return text


def _compress(node: Node) -> CompressMode:
    return cast(CompressMode, _choice(node, COMPRESS_MODES, "GPU code compression"))


def _choice(node: Node, known: tuple[str, ...], what: str) -> str:
    """A value that must be one of `known`."""
    value = node.str()
    if value not in known:
        raise node.error(f"unknown {what} '{value}' (known: {', '.join(known)})")
    return value


def _size_limit(node: Node) -> SizeLimit:
    try:
        return parse_size_limit(node.scalar_text())
    except ValueError as exc:
        raise node.error(str(exc)) from None


def _project_kind(node: Node) -> ProjectKind:
    return cast(ProjectKind, _choice(node, PROJECT_KINDS, "project kind"))


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# What the factory sets for every PEP 517 build itself, per cell.
FACTORY_ENV = frozenset({
    "TORCH_CUDA_ARCH_LIST", "CUDA_HOME", "CUDA_PATH", "MAX_JOBS", "NVCC_THREADS",
    "SOURCE_DATE_EPOCH", "CC", "CXX", "PATH", "PYTHONPATH", "HOME", "PYTORCH_NVCC",
})


def _build_env(node: Node) -> tuple[tuple[str, str], ...]:
    """env: {NAME: VALUE}: variables a project's build reads (a FORCE_BUILD switch, say)."""
    if not isinstance(node.value, dict):
        raise node.error("expected a table of variables, e.g.  env: {MY_FORCE_BUILD: \"TRUE\"}")
    found = []
    for name, value in node.mapping().items():
        if not _ENV_NAME.fullmatch(name):
            raise value.error(f"'{name}' is not an environment variable name")
        if name in FACTORY_ENV:
            raise value.error(f"{name} is set by the factory for each cell; leave it out")
        text = value.scalar_text()
        if "\0" in text:
            raise value.error("the value holds a NUL byte")
        found.append((name, text))
    return tuple(found)


def _depends(node: Node, base: Path) -> tuple[DependencyEntry, ...]:
    """depends: {NAME: {git: URL, rev: REV} | {path: FOLDER} | {wheel: FILE} | {pypi: true}}"""
    entries = []
    for name, item in node.mapping().items():
        release = dependency_release(name)
        if release is None:
            known = ", ".join(sorted(dependency_releases()))
            raise item.error(f"unknown dependency '{name}' (the factory provides: {known})")
        if not isinstance(item.value, dict):
            raise item.error("expected a table with one of git:, path:, wheel: or pypi: true")
        kinds = [kind for kind in DEPENDENCY_KINDS if kind in item.value]
        if len(kinds) != 1:
            raise item.error("give exactly one of git: (a repository URL or folder, with rev:), "
                             "path: (a folder with the project's git layout), wheel: (a wheel "
                             "file) or pypi: true")
        kind = cast(DependencyKind, kinds[0])
        fields = item.table([kind, "rev"] if kind == "git" else [kind])
        if kind == "pypi":
            if fields["pypi"].value is not True:
                raise fields["pypi"].error("the only value is true (PyPI's wheel of the release)")
            if release.pypi is None:
                raise fields["pypi"].error(f"PyPI publishes no wheel of {release.project} "
                                           f"{release.version}; take it from git")
            entries.append(DependencyEntry(name, kind, release.pypi, line=item.line))
            continue
        if kind == "git":
            text, folder = _git_location(fields["git"], base)
        else:
            text = fields[kind].nonempty_str().strip()
            folder = _local_folder(fields[kind], text, base)
            if kind == "path" and not folder.is_dir():
                raise fields[kind].error(f"folder '{text}' does not exist")
            if kind == "wheel" and not (folder.is_file() and folder.name.endswith(".whl")):
                raise fields[kind].error(f"'{text}' is not a wheel file (.whl)")
        rev = _rev(fields["rev"], release.tag) if "rev" in fields else None
        entries.append(DependencyEntry(name, kind, text, rev, folder, item.line))
    return tuple(entries)


def _path_source(fields: dict[str, Node], base: Path,
                 stated: ProjectKind | None) -> SourceRequest:
    text = fields["path"].nonempty_str()
    folder = _local_folder(fields["path"], text, base)
    if folder.exists() and not folder.is_dir():
        raise fields["path"].error(f"'{text}' is a file; give the kernel's folder")
    if not folder.is_dir():
        raise fields["path"].error(f"kernel folder '{text}' does not exist")
    if project_kind(folder, stated) is None:
        wanted = {None: "build.toml (kernel-builder) or setup.py / pyproject.toml (PEP 517)",
                  "kernel-builder": "build.toml", "pep517": "setup.py or pyproject.toml"}
        raise fields["path"].error(f"'{text}' has no {wanted[stated]}")
    return SourceRequest("path", Path(text).as_posix(), folder=folder)


def _git_source(fields: dict[str, Node], base: Path,
                stated: ProjectKind | None = None) -> SourceRequest:
    url, folder = _git_location(fields["git"], base)
    return SourceRequest("git", url, _rev(fields.get("rev"), "HEAD"),
                         _subdir(fields.get("subdir")), folder)


def _git_location(node: Node, base: Path) -> tuple[str, Path | None]:
    """A `git:` value (a kernel's or a dependency's): the URL as written, and the folder when
    it names a local repository."""
    url = node.nonempty_str().strip().rstrip("/")
    _refuse_credentials(node, url, "use a git credential helper instead")
    if _GIT_URL.fullmatch(url):
        return url, None
    if "://" in url or any(c.isspace() for c in url):
        raise node.error(f"'{url}' is not a git URL (https://, ssh://, git://, file://, "
                         "user@host:path or a local folder)")
    folder = _local_folder(node, url, base)
    if not folder.is_dir():
        raise node.error(f"'{url}' is neither a git URL nor an existing folder")
    return url, folder


def _costs_folder(node: Node, base: Path) -> Path:
    """costs: FOLDER, a cost book (<kernel>.json files) kept beside the matrix."""
    folder = _local_folder(node, node.nonempty_str(), base)
    if not folder.is_dir():
        raise node.error(f"'{node.value}' is not a folder (a cost book: the <kernel>.json files "
                         "of costs/ in an object cache, or of an --export-objects folder)")
    return folder


def _local_folder(node: Node, text: str, base: Path) -> Path:
    """A folder the matrix names, relative to the matrix, resolved."""
    if "\0" in text:
        raise node.error("the path holds a NUL byte")
    try:
        return (base / Path(text).expanduser()).resolve()
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop (Python < 3.13)
        raise node.error(f"'{text}' cannot be followed ({exc})") from None


def _refuse_credentials(node: Node, url: str, instead: str) -> None:
    refuse_credentials(url, key=node.key, file=node.file, line=node.line, instead=instead)


def _hub_source(fields: dict[str, Node], base: Path,
                stated: ProjectKind | None = None) -> SourceRequest:
    repo = fields["hub"].nonempty_str().strip()
    if not _HUB_REPO.fullmatch(repo) or ".." in repo:
        raise fields["hub"].error(f"'{repo}' is not a Hugging Face repo id (org/name)")
    return SourceRequest("hub", repo, _rev(fields.get("revision"), "main"),
                         _subdir(fields.get("subdir")))


def _rev(node: Node | None, default: str) -> str:
    if node is None:
        return default
    text = node.scalar_text().strip()
    if not _REV.fullmatch(text) or ".." in text or text.endswith((".lock", "/")):
        raise node.error(f"'{text}' is not a branch, tag or commit name")
    return text


def _subdir(node: Node | None) -> str | None:
    if node is None:
        return None
    text = node.nonempty_str().strip()
    path = PurePosixPath(text)
    if leaves_root(text) or ".git" in path.parts or "\\" in text:
        raise node.error(f"'{text}' must be a folder inside the repository (relative, "
                         "without '..')")
    return None if path == PurePosixPath(".") else path.as_posix()


MAX_VERSION = 40


def _wheel_version(node: Node) -> str:
    text = node.scalar_text().strip()
    try:
        version = Version(text)
    except InvalidVersion:
        raise node.error(f"'{text}' is not a valid Python package version (e.g. 1.0.0)") from None
    if version.local is not None:
        raise node.error(f"'{text}' has a local label; the factory adds '+<label>' itself per cell")
    if len(str(version)) > MAX_VERSION:
        raise node.error(f"the version is {len(str(version))} characters long; at most "
                         f"{MAX_VERSION} (it is part of every wheel's file name)")
    return str(version)


def _version(node: Node) -> Version:
    try:
        return parse_release(node.scalar_text())
    except ValueError as exc:
        raise node.error(str(exc)) from None


MAX_LATEST = 20  # more torch releases than any matrix builds


def _latest(node: Node) -> LatestTorch:
    """torch: {latest: N, pre: false, index: URL}."""
    fields = node.table(["latest", "pre", "index"], required=["latest"])
    count = fields["latest"].int()
    if not 1 <= count <= MAX_LATEST:
        raise fields["latest"].error(f"give how many of the newest torch releases to build, "
                                     f"1 to {MAX_LATEST}")
    index = _index_url(fields["index"]) if "index" in fields else defaults.TORCH_INDEX
    return LatestTorch(count, fields["pre"].bool() if "pre" in fields else False, index,
                       node.line)


def _follow(node: Node) -> FollowCuda:
    """cuda: {follow: torch, sms: [...], ptx: true}."""
    fields = node.table(["follow", "sms", "ptx"], required=["follow"])
    if fields["follow"].str() != "torch":
        raise fields["follow"].error("the only thing CUDA versions can follow is torch "
                                     "(follow: torch)")
    sms = None
    if "sms" in fields:
        sms = []
        for item in _nonempty_list(fields["sms"]):
            text = item.scalar_text()
            try:
                capability = Capability.parse(text)
            except ValueError as exc:
                raise item.error(str(exc)) from None
            if capability.variant or capability.ptx or not capability.is_known:
                raise item.error(f"'{text}' is not an SM like 9.0 (known: "
                                 f"{', '.join(str(sm) for sm in known_sms())})")
            sms.append(capability.base)
    return FollowCuda(tuple(sms) if sms is not None else None,
                      fields["ptx"].bool() if "ptx" in fields else defaults.PTX_FOR_NEWEST_SM,
                      node.line)


def _known_builds(matrix: Matrix, node: Node) -> list[ResolvedTorch]:
    """The PyPI builds of the matrix's listed torch releases, as the factory knows them."""
    found = []
    for entry in matrix.torch:
        release = torch_release(entry.version) if entry.version is not None else None
        if entry.python is not None or release is None:
            raise node.error(f"follow: torch needs the CUDA version of {entry.describe()}, "
                             "which the factory does not know; list the CUDA versions")
        found.append(ResolvedTorch(release.version, str(release.version), release.pypi_cuda))
    return found


def with_resolved_torches(matrix: Matrix, resolved: list[ResolvedTorch]) -> Matrix:
    """The matrix with `torch: {latest: N}` and `cuda: {follow: torch}` filled in: the
    resolved releases as its torch list; with follow, each build's CUDA version as the CUDA
    list, each torch paired with its own only. Without follow, a release the factory does
    not know is kept from the CUDA versions its index has no build for."""
    torch = matrix.torch
    if matrix.torch_latest is not None:
        torch = tuple(TorchEntry(found.release, line=matrix.torch_latest.line,
                                 key="torch.latest") for found in resolved)
    cuda, excludes = matrix.cuda, list(matrix.excludes)
    follow = matrix.cuda_follow
    if follow is not None:
        entries = []
        for version in sorted({found.cuda for found in resolved}, reverse=True):
            policy = cuda_policy(version)
            if policy is None or version not in cuda_releases():
                users = ", ".join(str(found.release) for found in resolved
                                  if found.cuda == version)
                raise ConfigError(f"torch {users} is built with CUDA {version}, which this "
                                  "factory does not know", file=matrix.path, line=follow.line,
                                  key="cuda.follow")
            sms = policy.default if follow.sms is None else \
                tuple(sm for sm in follow.sms if sm in policy.sms)
            if not sms:
                raise ConfigError(f"CUDA {version} compiles none of cuda.sms", file=matrix.path,
                                  line=follow.line, key="cuda.sms")
            entries.append(CudaEntry(version, sms, follow.ptx, None, None, follow.line))
        cuda = tuple(entries)
    for found in resolved:
        for entry in cuda:
            other = major_minor(entry.version) != found.cuda
            unknown = torch_release(found.release) is None and entry.torch_index is None
            if other and (follow is not None or unknown):
                excludes.append(Exclude(None, found.release, major_minor(entry.version), None,
                                        None))
    return replace(matrix, torch=torch, cuda=cuda, excludes=tuple(excludes),
                   resolved=tuple(resolved))


def _torch_entries(node: Node, base: Path) -> tuple[TorchEntry, ...]:
    entries: list[TorchEntry] = []
    for item in _nonempty_list(node):
        if isinstance(item.value, dict) and "version" in item.value:
            entries.append(_index_only_torch(item, entries))
            continue
        if isinstance(item.value, dict):
            entries.append(_installed_torch(item, base))
            continue
        version = _torch_version(item, entries)
        if torch_release(version) is None:
            known = ", ".join(str(v) for v in sorted(torch_releases()))
            raise item.error(f"torch {version} is not a PyTorch release the factory knows "
                             f"(known: {known}); a torch already installed can be named by its "
                             "interpreter: {python: /path/to/bin/python}, and a newer one "
                             f"served without a build: {{version: \"{version}\", index-only: "
                             "true}")
        entries.append(TorchEntry(version, line=item.line, key=item.key))
    return tuple(entries)


def _torch_version(item: Node, entries: list[TorchEntry]) -> Version:
    version = _version(item)
    if len(version.release) < 2:
        raise item.error(f"give torch as major.minor (e.g. 2.11), got '{version}'")
    if any(entry.version == major_minor(version) for entry in entries):
        raise item.error(f"torch {major_minor(version)} is listed twice")
    return major_minor(version)


def _index_only_torch(item: Node, entries: list[TorchEntry]) -> TorchEntry:
    """{version: "2.14", index-only: true}: a torch whose per-cell indexes the matrix serves
    (stable-ABI and pure-Python wheels are listed there) but that nothing is compiled
    against: a torch released after the factory, or one not worth a build of every kernel.
    Any major.minor is taken: that is the point of serving a torch on the day it ships."""
    fields = item.table(["version", "index-only"], required=["version", "index-only"])
    if not fields["index-only"].bool():
        raise fields["index-only"].error("a torch entry with a version is index-only: write "
                                         "index-only: true, or give the version alone")
    version = _torch_version(fields["version"], entries)
    return TorchEntry(version, line=item.line, key=item.key, index_only=True)


def _installed_torch(item: Node, base: Path) -> TorchEntry:
    """{python: PATH}: the torch of an interpreter of this machine; {image: REF, python: PATH}:
    the torch (and CUDA toolkit) of a container image, PATH inside it (default python3)."""
    fields = item.table(["python", "image"])
    if not fields:
        raise item.error("give the torch's interpreter ({python: /path/to/bin/python}) or a "
                         "container image that has torch and nvcc ({image: NAME})")
    if "image" in fields:
        image = _image_reference(fields["image"], "a container image holding torch and nvcc",
                                 template=False)
        python = fields["python"].nonempty_str() if "python" in fields else "python3"
        if "\0" in python or any(c.isspace() for c in python):
            raise fields["python"].error(f"'{python}' is not a path to an interpreter")
        return TorchEntry(None, python=python, image=image, line=item.line, key=item.key)
    node = fields["python"]
    return TorchEntry(None, python=str(_interpreter(node, node.nonempty_str(), base)),
                      line=item.line, key=item.key)


def _interpreter(node: Node, text: str, base: Path) -> Path:
    try:
        return _find_interpreter(text, base)
    except ValueError as exc:
        raise node.error(str(exc)) from None


def _command_line_torches(pythons: list[Path]) -> tuple[TorchEntry, ...]:
    entries = []
    for python in pythons:
        try:
            path = _find_interpreter(str(python), Path.cwd())
        except ValueError as exc:
            raise ConfigError(str(exc), key="--torch-python") from None
        entries.append(TorchEntry(None, python=str(path), key="--torch-python"))
    return tuple(entries)


def _find_interpreter(text: str, base: Path) -> Path:
    """An interpreter on this machine: a command on PATH, or a path (relative to `base`);
    ValueError with the reason when there is none."""
    if "/" not in text:
        found = shutil.which(text)
        if found is None:
            raise ValueError(f"'{text}' is not a command on PATH; give the interpreter's path")
        return Path(found)
    if "\0" in text:
        raise ValueError("the path holds a NUL byte")
    # Not resolved: a venv's python is a link, and the venv is known by where the link is.
    path = Path(os.path.abspath(base / Path(text).expanduser()))
    if not path.is_file() or not os.access(path, os.X_OK):
        raise ValueError(f"'{text}' is not an interpreter (no executable file there)")
    return path


def _cuda_entries(node: Node, base: Path) -> tuple[CudaEntry, ...]:
    if not isinstance(node.value, dict):
        raise node.error("expected a table of CUDA versions, e.g.  "
                         "cuda: {\"13.0\": {sms: [\"9.0\"]}}")
    entries: list[CudaEntry] = []
    for text, item in node.mapping().items():
        try:
            version = parse_release(text)
        except ValueError as exc:
            raise item.error(str(exc)) from None
        if len(version.release) < 2:
            raise item.error(f"give CUDA as major.minor (e.g. 13.0), got '{version}'")
        policy = cuda_policy(version)
        if policy is None:
            oldest = cuda_policies()[0].since
            raise item.error(f"CUDA {version} is too old: the factory builds with CUDA {oldest} "
                             "and newer")
        if major_minor(version) not in cuda_releases():
            known = cuda_releases()
            raise item.error(f"CUDA {version} is not a CUDA release the factory knows (known: "
                             f"{', '.join(str(release) for release in known)})")
        if any(major_minor(entry.version) == major_minor(version) for entry in entries):
            raise item.error(f"CUDA {major_minor(version)} is listed twice")
        settings = {} if item.value is None else item.table(["sms", "ptx", "home", "torch-index"])
        sms = policy.default
        if "sms" in settings:
            sms = _sms(settings["sms"], policy, version)
        home = None
        if "home" in settings:
            home = _local_folder(settings["home"], settings["home"].nonempty_str(), base)
            if not (home / "bin" / "nvcc").is_file():
                raise settings["home"].error(f"no CUDA toolkit at '{settings['home'].str()}' "
                                             "(expected bin/nvcc there)")
        index = _torch_index(settings["torch-index"]) if "torch-index" in settings else None
        entries.append(CudaEntry(version, tuple(sms),
                                 settings["ptx"].bool() if "ptx" in settings
                                 else defaults.PTX_FOR_NEWEST_SM,
                                 home, index, item.line))
    if not entries:
        raise node.error("must list at least one CUDA version")
    return tuple(entries)


def _sms(node: Node, policy: CudaPolicy, cuda: Version) -> tuple[Version, ...]:
    sms: list[Version] = []
    for item in _nonempty_list(node):
        text = item.scalar_text()
        try:
            capability = Capability.parse(text)
        except ValueError as exc:
            raise item.error(str(exc)) from None
        if capability.ptx:
            raise item.error(f"'{text}': PTX is added for the newest SM of the list by itself "
                             "(set ptx: false to leave it out)")
        if capability.variant:
            raise item.error(f"'{text}': arch- and family-specific variants belong in a kernel's "
                             "cuda-capabilities; list plain SMs here")
        problem = check_supported(capability, policy, cuda)
        if problem:
            raise item.error(problem)
        if capability.base in sms:
            raise item.error(f"SM {capability.base} is listed twice")
        sms.append(capability.base)
    return tuple(sorted(sms))


OLDEST_PYTHON = Version("3.9")


def _pythons(node: Node) -> tuple[CPython, ...]:
    """python: ["3.11", "3.12", "3.14t"]: the CPythons per-Python wheels are built for (3.Nt:
    a free-threaded build, which gets a wheel of its own whatever the project)."""
    found: list[CPython] = []
    for item in _nonempty_list(node):
        try:
            python = CPython.parse(item.scalar_text())
        except ValueError as exc:
            raise item.error(str(exc)) from None
        if python.version < OLDEST_PYTHON:
            raise item.error(f"Python {python.version} is older than any torch the factory "
                             f"builds for supports ({OLDEST_PYTHON} and newer)")
        if python in found:
            raise item.error(f"Python {python} is listed twice")
        found.append(python)
    return tuple(sorted(found))


def _platforms(node: Node | None) -> tuple[str, ...]:
    if node is None:
        return (defaults.host_platform(),)
    platforms = []
    for item in _nonempty_list(node):
        value = item.str()
        if value not in PLATFORMS:
            raise item.error(f"unknown platform '{value}' (known: {', '.join(PLATFORMS)})")
        if value in platforms:
            raise item.error(f"platform '{value}' is listed twice")
        platforms.append(value)
    return tuple(platforms)


def _excludes(node: Node | None) -> tuple[Exclude, ...]:
    if node is None:
        return ()
    excludes = []
    for item in node.list():
        fields = item.table(["kernel", "torch", "cuda", "platform"])
        if not fields:
            raise item.error("an exclude entry needs at least one of kernel, torch, cuda, platform")
        platform = fields["platform"].str() if "platform" in fields else None
        if platform is not None and platform not in PLATFORMS:
            raise fields["platform"].error(
                f"unknown platform '{platform}' (known: {', '.join(PLATFORMS)})")
        excludes.append(Exclude(
            kernel=fields["kernel"].nonempty_str() if "kernel" in fields else None,
            torch=major_minor(_version(fields["torch"])) if "torch" in fields else None,
            cuda=major_minor(_version(fields["cuda"])) if "cuda" in fields else None,
            platform=platform,
            line=item.line,
        ))
    return tuple(excludes)


def _torch_index(node: Node) -> str:
    return _index_url(node, True, "give them to uv through UV_INDEX_* variables or a netrc file")


def _cpu(node: Node) -> CpuEntry | None:
    """`cpu: true`, `cpu: false` or `cpu: {torch-index: URL}`."""
    if isinstance(node.value, dict):
        settings = node.table(["torch-index"])
        index = _torch_index(settings["torch-index"]) if "torch-index" in settings else None
        return CpuEntry(index, node.line)
    return CpuEntry(None, node.line) if node.bool() else None


def _runner(node: Node) -> RunnerChoice:
    return cast(RunnerChoice, _choice(node, RUNNERS, "runner"))


_IMAGE_REFERENCE = re.compile(r"[a-z0-9][a-z0-9._/:{}-]*(@sha256:[0-9a-f]{64})?")


def _docker(node: Node) -> str | None:
    if not isinstance(node.value, dict):
        raise node.error("expected a table, e.g.  docker: "
                         "{base: quay.io/pypa/manylinux_2_28_{arch}}")
    fields = node.table(["base"])
    if "base" not in fields:
        return None
    return _image_reference(fields["base"], "{arch} stands for the platform")


def _image_reference(node: Node, hint: str, template: bool = True) -> str:
    text = node.nonempty_str()
    if not _IMAGE_REFERENCE.fullmatch(text) or (not template and ("{" in text or "}" in text)):
        raise node.error(f"'{text}' is not an image reference (name[:tag][@sha256:digest]; "
                         f"{hint})")
    return text


MAX_LABEL_TEMPLATE = 64


def _placeholders(node: Node, template: str, what: str) -> list[tuple[str, str, str | None]]:
    """A template's {placeholders}: (name, format spec, conversion) each."""
    try:
        return [(name, spec or "", conversion) for _, name, spec, conversion
                in string.Formatter().parse(template) if name is not None]
    except ValueError as exc:
        raise node.error(f"invalid {what} template: {exc}") from None


def _check_label_template(node: Node, known: tuple[str, ...] = LABEL_FIELDS) -> None:
    template = node.str()
    parsed = _placeholders(node, template, "label")
    if len(template) > MAX_LABEL_TEMPLATE:
        raise node.error(f"the label template is {len(template)} characters long; at most "
                         f"{MAX_LABEL_TEMPLATE}")
    if any(spec or conversion for _, spec, conversion in parsed):
        raise node.error("placeholders take no format spec or conversion: write {cuda}, not "
                         "{cuda:>5} or {cuda!r}")
    fields = [name for name, _, _ in parsed]
    for name in fields:
        if name in LABEL_FIELDS and name not in known:
            raise node.error(f"'{{{name}}}' has no single value for a stable-ABI wheel, which "
                             "serves every CUDA minor of its major: use {cuda_major}")
        if name not in known:
            raise node.error(f"unknown placeholder '{{{name}}}' in the label "
                             f"(known: {', '.join('{' + f + '}' for f in known)})")
