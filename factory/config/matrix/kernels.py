"""matrix.yaml's kernels: each entry's source, version, kind and build settings."""

from __future__ import annotations

import re
from pathlib import Path
from typing import cast

from packaging.version import InvalidVersion

from ...values.versions import Version
from ..model import KernelEntry, SourceKind, TestSelection
from ..nodes import Node
from ..rules import ToolchainRule, apply_rule_entries
from ..spec import PROJECT_KINDS, ProjectKind
from .fields import nonempty_list, read_choice, read_compress
from .labels import read_dist_name
from .sources import read_git_source, read_hub_source, read_path_source
from .tests import read_tests

__all__ = ["FACTORY_ENV", "MAX_VERSION", "read_kernels"]


_ENTRY_KEYS = ("version", "kind", "env", "guard", "compress", "tests", "dist-name",
               "toolchain-rules", "needs-gil")

_KERNEL_KEYS: dict[SourceKind, tuple[str, ...]] = {
    "path": ("path", *_ENTRY_KEYS),
    "git": ("git", "rev", "subdir", *_ENTRY_KEYS),
    "hub": ("hub", "revision", "subdir", *_ENTRY_KEYS),
}


def read_kernels(node: Node, base: Path, tests: TestSelection,
             rules: tuple[ToolchainRule, ...]) -> tuple[KernelEntry, ...]:
    entries = []
    for index, item in enumerate(nonempty_list(node)):
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
        source = {"path": read_path_source, "git": read_git_source, "hub": read_hub_source}[kind](
            fields, base, stated)
        version = _wheel_version(fields["version"]) if "version" in fields else None
        env = _build_env(fields["env"]) if "env" in fields else ()
        guard = fields["guard"].bool() if "guard" in fields else True
        if not guard and stated == "kernel-builder":
            raise fields["guard"].error("a kernel-builder kernel's wheel always has its import "
                                        "guard; guard: false is for PEP 517 projects")
        compress = read_compress(fields["compress"]) if "compress" in fields else None
        chosen = read_tests(fields["tests"], tests) if "tests" in fields else tests
        dist_name = read_dist_name(fields["dist-name"]) if "dist-name" in fields else None
        own = (apply_rule_entries(rules, fields["toolchain-rules"])
               if "toolchain-rules" in fields else None)
        needs_gil = fields["needs-gil"].bool() if "needs-gil" in fields else False
        entries.append(KernelEntry(source, version, item.line, index, stated, env, guard,
                                   compress, chosen, dist_name, own, needs_gil))
    return tuple(entries)


def _project_kind(node: Node) -> ProjectKind:
    return cast(ProjectKind, read_choice(node, PROJECT_KINDS, "project kind"))


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
