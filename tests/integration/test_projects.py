"""PEP 517 projects (setup.py / pyproject.toml CUDA extensions): how they are recognised, named
and planned (one cell per CPython, or one abi3 cell), and how their metadata is re-issued."""

from __future__ import annotations

import json

from ..conftest import EXAMPLE, factory_main, write
from ..unit.test_projects import project


def plan_ids(tmp_path, capsys, python: str, limited: str = "") -> list[str]:
    project(tmp_path / "fused", limited)
    write(tmp_path / "matrix.yaml", f"""
        kernels:
          - path: fused
            version: 1.0.0
            env: {{FUSED_FORCE_BUILD: "TRUE"}}
        torch: ["2.11"]
        cuda: {{"13.0": {{sms: ["8.0", "9.0"]}}}}
        {python}
    """)
    result = factory_main("plan", str(tmp_path / "matrix.yaml"), "--format", "json",
                          capsys=capsys)
    assert result.exit == 0, result.stderr
    return [cell for job in json.loads(result.stdout)["jobs"] for cell in job["cells"]]


def test_the_plan_has_a_cell_per_cpython(tmp_path, capsys):
    assert plan_ids(tmp_path, capsys, 'python: ["3.12", "3.11"]') == [
        "fused_op/cu130torch211/x86_64/cp311", "fused_op/cu130torch211/x86_64/cp312"]


def test_an_abi3_project_has_one_cell_built_with_the_oldest_python(tmp_path, capsys):
    assert plan_ids(tmp_path, capsys, 'python: ["3.12", "3.10"]', ", py_limited_api=True") == [
        "fused_op/cu130torch211/x86_64"]


def test_guard_false_is_for_projects_only(tmp_path, capsys):
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
