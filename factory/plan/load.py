"""From a matrix.yaml to a plan: every input validated and every kernel source fetched before
any cell is built, so bad input fails before work starts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .. import defaults
from ..config.buildtoml import read_build_toml
from ..config.matrix import load_matrix, read_torches
from ..config.model import Matrix
from ..sources.resolve import resolve_kernels
from .cells import Kernel, Plan, make_plan

__all__ = ["plan_matrix", "resolve_matrix"]


def resolve_matrix(matrix_path: Path, cache: Path, say: Callable[[str], None],
                   offline: bool = False, locked: bool = False,
                   torch_pythons: list[Path] | None = None) -> tuple[Matrix, list[Kernel]]:
    """The validated matrix and its kernels: each source fetched, each build.toml read (its
    warnings said). Installed torches are not read yet (plan_matrix reads them)."""
    matrix = load_matrix(matrix_path, torch_pythons)
    kernels = []
    for found in resolve_kernels(matrix, cache, offline=offline, locked=locked, say=say):
        spec = read_build_toml(found.tree.root)
        for warning in spec.warnings:
            say(f"warning: {warning}")
        assert found.version is not None  # resolve_kernels refuses a kernel without one
        kernels.append(Kernel(found.entry, found.tree, spec, found.version))
    return matrix, kernels


def plan_matrix(matrix_path: Path, cache: Path, say: Callable[[str], None],
                offline: bool = False, locked: bool = False,
                every_platform: bool = False, torch_pythons: list[Path] | None = None) -> Plan:
    """The matrix's cells; with `every_platform`, other platforms' cells too (a CI fan-out's
    plan), else those this machine cannot build are skipped."""
    matrix, kernels = resolve_matrix(matrix_path, cache, say, offline, locked, torch_pythons)
    matrix = read_torches(matrix, offline)
    return make_plan(matrix, kernels, None if every_platform else defaults.host_platform())
