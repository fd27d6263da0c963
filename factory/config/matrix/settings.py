"""matrix.yaml's other settings of a build: python, platforms, exclude, runner, docker, cpu,
wheelhouse, costs and name-clash.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

from ... import defaults
from ...values.pythons import CPython
from ...values.stores import object_store_problem
from ...values.versions import Version, major_minor
from ..model import (
    CLASH_POLICIES,
    PLATFORMS,
    RUNNERS,
    ClashPolicy,
    CpuEntry,
    Exclude,
    NameCheck,
    RunnerChoice,
)
from ..nodes import Node
from ..wheelhouse import wheelhouse_problem
from .fields import (
    local_folder,
    nonempty_list,
    read_choice,
    read_image_reference,
    read_index_url,
    read_torch_index,
    read_version,
)

__all__ = ["OLDEST_PYTHON", "read_costs_folder", "read_cpu", "read_docker", "read_excludes",
           "read_name_check", "read_object_store", "read_platforms", "read_pythons", "read_runner",
           "read_wheelhouses"]


def read_name_check(node: Node) -> NameCheck:
    """name-clash: warn | refuse | ignore, or {policy: ..., index: URL}."""
    if not isinstance(node.value, dict):
        return NameCheck(cast(ClashPolicy, read_choice(node, CLASH_POLICIES, "name-clash policy")),
                         None, node.line)
    fields = node.table(["policy", "index"])
    policy = cast(ClashPolicy, read_choice(fields["policy"], CLASH_POLICIES, "name-clash policy")) \
        if "policy" in fields else NameCheck.policy
    index = read_index_url(fields["index"]) if "index" in fields else None
    return NameCheck(policy, index, node.line)


def read_wheelhouses(node: Node, base: Path, filling: bool) -> tuple[Path, ...]:
    """wheelhouse: DIR or [DIR, ...]: folders of wheels the test environments may be installed
    from (relative to the matrix), each checked now (unless being `filling`)."""
    items = nonempty_list(node) if isinstance(node.value, list) else [node]
    folders = []
    for item in items:
        text = item.nonempty_str()
        folder = local_folder(item, text, base)
        problem = None if filling and not folder.exists() else wheelhouse_problem(folder)
        if problem is not None and not (filling and problem.startswith("holds no wheel")):
            raise item.error(f"wheelhouse '{text}' {problem}")
        folders.append(folder)
    return tuple(dict.fromkeys(folders))


def read_object_store(node: Node) -> str:
    """object-store: URL, the remote object store shared by machines (no password here)."""
    url = node.nonempty_str()
    problem = object_store_problem(url, password_allowed=False)
    if problem is not None:
        raise node.error(f"the object store's URL {problem}")
    return url


def read_costs_folder(node: Node, base: Path) -> Path:
    """costs: FOLDER, a cost book (<kernel>.json files) kept beside the matrix."""
    folder = local_folder(node, node.nonempty_str(), base)
    if not folder.is_dir():
        raise node.error(f"'{node.value}' is not a folder (a cost book: the <kernel>.json files "
                         "of costs/ in an object cache, or of an --export-objects folder)")
    return folder


OLDEST_PYTHON = Version("3.9")


def read_pythons(node: Node) -> tuple[CPython, ...]:
    """python: ["3.11", "3.12", "3.14t"]: the CPythons per-Python wheels are built for (3.Nt:
    a free-threaded build, which gets a wheel of its own whatever the project)."""
    found: list[CPython] = []
    for item in nonempty_list(node):
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


def read_platforms(node: Node | None) -> tuple[str, ...]:
    if node is None:
        return (defaults.host_platform(),)
    platforms = []
    for item in nonempty_list(node):
        value = item.str()
        if value not in PLATFORMS:
            raise item.error(f"unknown platform '{value}' (known: {', '.join(PLATFORMS)})")
        if value in platforms:
            raise item.error(f"platform '{value}' is listed twice")
        platforms.append(value)
    return tuple(platforms)


def read_excludes(node: Node | None) -> tuple[Exclude, ...]:
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
            torch=major_minor(read_version(fields["torch"])) if "torch" in fields else None,
            cuda=major_minor(read_version(fields["cuda"])) if "cuda" in fields else None,
            platform=platform,
            line=item.line,
        ))
    return tuple(excludes)


def read_cpu(node: Node) -> CpuEntry | None:
    """`cpu: true`, `cpu: false` or `cpu: {torch-index: URL}`."""
    if isinstance(node.value, dict):
        settings = node.table(["torch-index"])
        index = read_torch_index(settings["torch-index"]) if "torch-index" in settings else None
        return CpuEntry(index, node.line)
    return CpuEntry(None, node.line) if node.bool() else None


def read_runner(node: Node) -> RunnerChoice:
    return cast(RunnerChoice, read_choice(node, RUNNERS, "runner"))


def read_docker(node: Node) -> str | None:
    if not isinstance(node.value, dict):
        raise node.error("expected a table, e.g.  docker: "
                         "{base: quay.io/pypa/manylinux_2_28_{arch}}")
    fields = node.table(["base"])
    if "base" not in fields:
        return None
    return read_image_reference(fields["base"], "{arch} stands for the platform")
