"""Adopting the factory in one step: `factory init` writes a kernel repo's matrix.yaml and a
caller of the reusable workflow; actionlint accepts the caller, and the reusable workflow's jobs
(plan, build, merge, Pages) run here, as GitHub would run them, build the example into a
site; the composite action (action.yml) installs the factory into a fresh environment, builds
a setup.py project's init-written matrix and publishes the index.

Builds use the local runner (`--runner local`): the docker runner's manylinux base images come
from a registry this machine cannot reach (tests/integration/test_docker.py covers it)."""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from factory import __version__
from factory.defaults import WORKFLOW_REPOSITORY

from ..support.checks import present
from ..support.factory import REPO, run_factory
from ..support.workflow_local import Run, runner_env
from ..support.workflows import lint

pytestmark = [pytest.mark.slow, pytest.mark.network]

GITHUB: dict[str, Any] = {
          "repository_owner": "owner", "repository": "owner/kernels", "ref_name": "main",
          "ref": "refs/heads/main", "run_id": "7", "run_attempt": "1",
          "event": {"repository": {"name": "kernels", "default_branch": "main"}}}
CLOSED = "http://127.0.0.1:9/"  # the site's URL: nothing answers, as before a first deploy


@contextlib.contextmanager
def served(folder: Path) -> Iterator[str]:
    """`factory serve` on the folder, at the URL it prints."""
    with subprocess.Popen([sys.executable, "-m", "factory", "serve", str(folder), "--port", "0"],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) as server:
        try:
            yield present(server.stdout).readline().split(" at ", 1)[1].split()[0]
        finally:
            server.terminate()


def kernel_repo(tmp_path: Path, example: str, *init: str) -> tuple[Path, str]:
    repo = shutil.copytree(REPO / "examples" / example, tmp_path / "repo")
    result = run_factory("init", *init, cwd=repo)
    assert result.exit == 0, result.stdout + result.stderr
    return repo, result.stdout


def test_init_writes_a_caller_actionlint_accepts_whose_workflow_builds_the_example(
        tmp_path: Path, factory_cache: Path, actionlint: list[str]) -> None:
    repo, said = kernel_repo(tmp_path, "img2gray", "--torch", "2.11", "--sms", "9.0",
                             "--github")
    assert said.splitlines()[0] == "wrote matrix.yaml: img2gray, torch 2.11, 1 cell(s)"
    caller = repo / ".github" / "workflows" / "wheels.yml"
    lines = [line for line in caller.read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    assert len(lines) <= 15, lines
    assert lint(actionlint, caller) == []
    (job,) = yaml.safe_load(caller.read_text())["jobs"].values()
    assert re.fullmatch(f"{WORKFLOW_REPOSITORY}/.github/workflows/kernel-wheels.yml"
                        "@[0-9a-f]{40}", job["uses"])
    assert f"  # v{__version__}\n" in caller.read_text()
    assert job["with"] == {"matrix": "matrix.yaml"}

    run = Run(repo, tmp_path / "runner", runner_env(
        f"{Path(sys.executable).parent}:/usr/bin:/bin", factory_cache, tmp_path / "home"),
        GITHUB)
    run.scratch.mkdir()
    results = run.workflow(REPO / ".github" / "workflows" / "kernel-wheels.yml",
                           {**job["with"], "build-args": "--runner local", "site-url": CLOSED})
    assert results == {"plan": "success", "compile": "skipped", "build": "success",
                       "merge": "success", "deploy": "success", "registry": "skipped",
                       "mirror": "skipped"}
    site = run.artifacts["github-pages"]
    (wheel,) = (site / "files").glob("img2gray-0.1.0+cu130torch211-cp39-abi3-manylinux_*.whl")
    page = (site / "cu130torch211" / "simple" / "img2gray" / "index.html").read_text()
    assert wheel.name.replace("+", "%2B") in page
    assert (site / "index.html").is_file()  # the browse page
    assert not (site / "logs").exists()  # the merge's private records stay out of the site

    # A second kernel joins the matrix; the site is up: only its cell is planned and built,
    # and the merge keeps what the site published.
    shutil.copytree(REPO / "tests" / "fixtures" / "noarch-kernel", repo / "noarch-kernel")
    matrix = yaml.safe_load((repo / "matrix.yaml").read_text())
    matrix["kernels"].append({"path": "noarch-kernel", "version": "2.0.0"})
    (repo / "matrix.yaml").write_text(yaml.safe_dump(matrix))
    # First a request from the run form for the cell the site has: the new kernel is left
    # out, and nothing is built.
    dispatch = {**GITHUB, "event_name": "workflow_dispatch", "event": {
        **GITHUB["event"], "inputs": {"kernel": "img2gray", "torch": "2.11", "cuda": "",
                                      "python": ""}}}

    def run_again(name: str, github: dict[str, Any]) -> tuple[Run, dict[str, str], str]:
        """The workflow run once more, with the site served."""
        with served(site) as url:
            again = Run(repo, tmp_path / name, run.env, github)
            again.scratch.mkdir()
            return again, again.workflow(
                REPO / ".github" / "workflows" / "kernel-wheels.yml",
                {**job["with"], "build-args": "--runner local", "site-url": url}), url

    request, results, url = run_again("request", dispatch)
    assert results["plan"] == "success" and results["build"] == results["merge"] == "skipped"
    assert f"--new: 1 cell(s) already in {url}, 0 to build" in "".join(request.logs)
    again, results, url = run_again("again", GITHUB)
    assert results["build"] == results["merge"] == results["deploy"] == "success"
    assert f"--new: 1 cell(s) already in {url}, 1 to build" in "".join(again.logs)
    (built,) = [folder for name, folder in again.artifacts.items() if name.startswith("job-")]
    assert [path.name for path in (built / "files").glob("*.whl")] == [
        "noarch_kernel-2.0.0-py3-none-any.whl"]
    published = again.artifacts["github-pages"] / "files"
    assert sorted(path.name for path in published.glob("*.whl")) == sorted(
        [wheel.name, "noarch_kernel-2.0.0-py3-none-any.whl"])
    assert (published / wheel.name).read_bytes() == wheel.read_bytes()


def test_the_action_installs_the_factory_builds_an_init_matrix_and_publishes(
        tmp_path: Path, factory_cache: Path) -> None:
    """A setup.py project: init writes its matrix for this machine's CPython; the action's
    steps install the factory from the action's folder into a fresh environment (standing for
    setup-python's), build, and publish to a folder."""
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    repo, _ = kernel_repo(tmp_path, "relu-scale", "--torch", "2.11", "--sms", "9.0",
                          "--python", python)
    assert f'python: ["{python}"]' in (repo / "matrix.yaml").read_text()
    environment = tmp_path / "python"
    subprocess.run([sys.executable, "-m", "venv", str(environment)], check=True)
    run = Run(repo, tmp_path / "runner", runner_env(
        f"{environment / 'bin'}:/usr/bin:/bin", factory_cache, tmp_path / "home"), GITHUB,
        actions={})
    run.scratch.mkdir()
    workspace = tmp_path / "workspace"
    shutil.copytree(repo, workspace)
    run.action(REPO / "action.yml", {"args": "--runner local", "publish-to": str(
        tmp_path / "site")}, workspace)
    assert (environment / "bin" / "factory").is_file()
    tag = "cp" + python.replace(".", "")
    (wheel,) = (workspace / "index" / "files").glob(
        f"relu_scale-1.0.0+cu130torch211-{tag}-{tag}-manylinux_*.whl")
    assert (tmp_path / "site" / "files" / wheel.name).read_bytes() == wheel.read_bytes()
    assert (tmp_path / "site" / "cu130torch211" / "simple" / "relu-scale" /
            "index.html").is_file()
