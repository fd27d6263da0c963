"""`factory init` writes a matrix `factory plan` takes, and a caller workflow beside it
(tests/integration/test_action.py builds such matrices and runs the workflow)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from factory import __version__
from factory.defaults import WORKFLOW_REPOSITORY

from ..support.factory import REPO, factory_main, run_factory
from ..support.plans import starter_kernel as kernel


def test_the_written_matrix_is_one_plan_takes(tmp_path: Path) -> None:
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
    text = (repo / ".github" / "workflows" / "wheels.yml").read_text()
    workflow = yaml.safe_load(text)
    # pinned by this checkout's commit, the release named beside it
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    assert workflow["jobs"]["wheels"]["uses"] == (
        f"{WORKFLOW_REPOSITORY}/.github/workflows/kernel-wheels.yml@{head}")
    assert f"kernel-wheels.yml@{head}  # v{__version__}\n" in text


def test_the_caller_is_pinned_by_the_commit_given_and_never_by_a_tag(tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    repo = kernel(tmp_path, capabilities='cuda-capabilities = ["9.0"]')
    commit = "0123456789abcdef0123456789abcdef01234567"
    result = factory_main("init", repo, "--torch", "2.11", "--github", "--ref", commit,
                          capsys=capsys)
    assert result.exit == 0, result.stderr
    assert f"kernel-wheels.yml@{commit}  # v{__version__}" in \
        (repo / ".github" / "workflows" / "wheels.yml").read_text()
    again = kernel(tmp_path / "again", capabilities='cuda-capabilities = ["9.0"]')
    result = factory_main("init", again, "--torch", "2.11", "--github", "--ref", "v1.2.0",
                          capsys=capsys)
    assert result.exit == 2
    assert result.stderr.strip() == (
        "error: --ref: is 'v1.2.0'; a caller pins the reusable workflow by a full commit (40 "
        "hex digits), which no one can move as a tag can be moved")
    assert not (again / "matrix.yaml").exists()
