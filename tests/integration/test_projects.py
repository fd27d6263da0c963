"""PEP 517 projects (setup.py / pyproject.toml CUDA extensions): how they are recognised, named
and planned (one cell per CPython, or one abi3 cell), and how their metadata is re-issued."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from factory.cells.kinds import kind_of
from factory.config.matrix import load_matrix
from factory.config.project import read_project
from factory.defaults import host_platform
from factory.plan.cells import make_plan
from factory.plan.model import Kernel
from factory.sources.facts import read_facts
from factory.sources.tree import resolve_path_source

from ..support.factory import EXAMPLE, factory_main, write
from ..support.plans import setup_py_project as project


def planned(tmp_path: Path, capsys: pytest.CaptureFixture[str], python: str, limited: str = "",
            torch: str = '["2.11"]',
            cuda: str = '{"13.0": {sms: ["8.0", "9.0"]}}') -> dict[str, Any]:
    project(tmp_path / "fused", limited)
    write(tmp_path / "matrix.yaml", f"""
        kernels:
          - path: fused
            version: 1.0.0
            env: {{FUSED_FORCE_BUILD: "TRUE"}}
        torch: {torch}
        cuda: {cuda}
        {python}
    """)
    result = factory_main("plan", str(tmp_path / "matrix.yaml"), "--format", "json",
                          capsys=capsys)
    assert result.exit == 0, result.stderr
    planned: dict[str, Any] = json.loads(result.stdout)
    return planned


def plan_ids(tmp_path: Path, capsys: pytest.CaptureFixture[str], python: str,
             limited: str = "") -> list[str]:
    return [cell for job in planned(tmp_path, capsys, python, limited)["jobs"]
            for cell in job["cells"]]


def test_the_plan_has_a_cell_per_cpython(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert plan_ids(tmp_path, capsys, 'python: ["3.12", "3.11"]') == [
        "fused_op/cu130torch211/x86_64/cp311", "fused_op/cu130torch211/x86_64/cp312"]


def test_an_abi3_project_has_one_cell_built_with_the_oldest_python(tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert plan_ids(tmp_path, capsys, 'python: ["3.12", "3.10"]', ", py_limited_api=True") == [
        "fused_op/cu130torch211/x86_64"]


def test_each_torch_release_gets_the_cpythons_it_has_wheels_for(tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """torch 2.15 dropped 3.10 and added 3.15; 2.14 has no 3.15: the rest is skipped, saying
    which CPythons the release has."""
    plan = planned(tmp_path, capsys, 'python: ["3.10", "3.15"]', torch='["2.14", "2.15"]',
                   cuda='{"13.0": {sms: ["9.0"]}, "13.2": {sms: ["9.0"]}}')
    assert [cell for job in plan["jobs"] for cell in job["cells"]] == [
        "fused_op/cu130torch214/x86_64/cp310", "fused_op/cu132torch215/x86_64/cp315"]
    skipped = plan["skipped"]
    assert skipped["fused_op/cu130torch214/x86_64/cp315"] == (
        "torch 2.14 has no wheels for CPython 3.15 (it has 3.10, 3.11, 3.12, 3.13, 3.14 and "
        "free-threaded 3.14t)")
    assert skipped["fused_op/cu132torch215/x86_64/cp310"] == (
        "torch 2.15 has no wheels for CPython 3.10 (it has 3.11, 3.12, 3.13, 3.14, 3.15 and "
        "free-threaded 3.14t, 3.15t)")


def test_an_abi3_project_is_built_with_the_oldest_cpython_the_release_has(tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    project(tmp_path / "fused", ", py_limited_api=True")
    matrix = load_matrix(write(tmp_path / "matrix.yaml", """
        kernels: [{path: fused, version: 1.0.0}]
        torch: ["2.15"]
        cuda: {"13.2": {sms: ["9.0"]}}
        python: ["3.10", "3.12", "3.11"]
    """))
    (entry,) = matrix.kernels
    spec = read_project(tmp_path / "fused", "pep517")
    plan = make_plan(matrix, [Kernel(entry, resolve_path_source(tmp_path / "fused"), spec,
                                     "1.0.0", read_facts(spec), kind_of(spec))],
                     host_platform())
    assert [(cell.id, str(cell.python)) for cell in plan.cells] == [
        ("fused_op/cu132torch215/x86_64", "3.11")]
    assert plan.skipped == ()  # the abi3 wheel serves 3.10 too, where a torch has it


def test_guard_false_is_for_projects_only(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "matrix.yaml", f"""
        kernels:
          - path: {EXAMPLE}
            version: 1.0.0
            guard: false
        torch: ["2.11"]
        cuda: {{"13.0": {{sms: ["9.0"]}}}}
    """)
    result = factory_main("plan", str(tmp_path / "matrix.yaml"), capsys=capsys)
    assert result.exit == 2
    assert "matrix.yaml:2: kernels[0].guard: a kernel-builder kernel's wheel always has its " \
        "import guard" in result.stderr, result.stderr


def test_a_free_threaded_cpython_gets_a_cell_of_its_own_where_the_release_has_it(tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """3.14t loads no abi3 module: a setup.py project, an abi3 one and a kernel-builder kernel
    each get a cp314t cell for torch 2.15; torch 2.14 has no 3.15t (skipped, with the reason)."""
    plan = planned(tmp_path, capsys, 'python: ["3.14t", "3.12", "3.15t"]',
                   torch='["2.14", "2.15"]', cuda='{follow: torch, sms: ["9.0"]}')
    assert [cell for job in plan["jobs"] for cell in job["cells"]] == [
        "fused_op/cu130torch214/x86_64/cp312", "fused_op/cu130torch214/x86_64/cp314t",
        "fused_op/cu132torch215/x86_64/cp312", "fused_op/cu132torch215/x86_64/cp314t",
        "fused_op/cu132torch215/x86_64/cp315t"]
    assert plan["skipped"] == {"fused_op/cu130torch214/x86_64/cp315t": (
        "torch 2.14 has no wheels for free-threaded CPython 3.15t (it has 3.10, 3.11, 3.12, 3.13, "
        "3.14 and free-threaded 3.14t)")}
    limited = planned(tmp_path / "abi3", capsys, 'python: ["3.12", "3.11", "3.14t"]',
                      ", py_limited_api=True", torch='["2.15"]', cuda='{"13.2": {sms: ["9.0"]}}')
    assert [cell for job in limited["jobs"] for cell in job["cells"]] == [
        "fused_op/cu132torch215/x86_64", "fused_op/cu132torch215/x86_64/cp314t"]

    write(tmp_path / "kb" / "matrix.yaml", f"""
        kernels:
          - path: {EXAMPLE}
            version: 1.0.0
        torch: ["2.15"]
        cuda: {{"13.2": {{sms: ["9.0"]}}}}
        python: ["3.12", "3.14t"]
        platforms: [x86_64, aarch64]
        cross: true
    """)
    result = factory_main("plan", str(tmp_path / "kb" / "matrix.yaml"), "--format", "json",
                          capsys=capsys)
    assert result.exit == 0, result.stderr
    kernel = json.loads(result.stdout)
    assert sorted(cell for job in kernel["jobs"] for cell in job["cells"]) == [
        "img2gray/cu132torch215/aarch64", "img2gray/cu132torch215/x86_64",
        "img2gray/cu132torch215/x86_64/cp314t"]
    assert kernel["skipped"] == {"img2gray/cu132torch215/aarch64/cp314t": (
        "a cross-compiled cell is proven with Debian's aarch64 CPython, which has no "
        "free-threaded build")}
