"""`factory init` writes a matrix `factory plan` takes, and a caller workflow beside it
(tests/integration/test_action.py builds such matrices and runs the workflow)."""

from __future__ import annotations

import json

import yaml

from factory.defaults import WORKFLOW_REPOSITORY

from ..conftest import run_factory
from ..unit.test_init import kernel


def test_the_written_matrix_is_one_plan_takes(tmp_path):
    repo = kernel(tmp_path, capabilities='cuda-capabilities = ["9.0"]')
    result = run_factory("init", repo, "--torch", "2.11", "--github")
    assert result.exit == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"wrote {repo / 'matrix.yaml'}: blend, torch 2.11, 1 cell(s)",
        f"wrote {repo / '.github' / 'workflows' / 'wheels.yml'}",
        f"next: factory plan {repo / 'matrix.yaml'}"]
    matrix = yaml.safe_load((repo / "matrix.yaml").read_text())
    assert matrix == {"kernels": [{"path": ".", "version": "0.1.0"}], "torch": ["2.11"],
                      "cuda": {"13.0": {"sms": ["9.0"]}}}
    planned = run_factory("plan", repo / "matrix.yaml", "--cache-dir", tmp_path / "cache")
    assert planned.exit == 0, planned.stderr
    assert list(json.loads(planned.stdout)["cells"]) == ["blend/cu130torch211/x86_64"]
    workflow = yaml.safe_load((repo / ".github" / "workflows" / "wheels.yml").read_text())
    assert workflow["jobs"]["wheels"]["uses"].startswith(
        f"{WORKFLOW_REPOSITORY}/.github/workflows/kernel-wheels.yml@v")
