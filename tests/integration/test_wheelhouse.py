"""Kernel tests on a machine with no network: `factory wheelhouse` downloads what a matrix's
test environments need (and only that: not what comes with torch, not what the target has),
and `factory build --test --offline --wheelhouse DIR` makes them from it, with an empty uv
cache. A requirement that needs torch (torchmetrics) is met by the cell's torch; one that
cannot be had makes the cell untested, in one line that says which, who asked and what to do;
a machine's own interpreter lends what it has (pytest) to the test environment."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from ..support.factory import REPO, cache_env, run_factory, write

pytestmark = [pytest.mark.slow, pytest.mark.network]

TESTS = """
import einops
import torch
import torchmetrics
from kernels import get_kernel

img2gray = get_kernel("someone-else/img2gray-fork")


def test_with_what_the_wheelhouse_gave():
    rgb = einops.rearrange(torch.zeros(3, 4, 4, dtype=torch.uint8), "c h w -> h w c")
    gray = img2gray.img2gray(rgb)
    assert gray.shape == (4, 4)
    assert torchmetrics.functional.mean_absolute_error(gray.float(), gray.float()) == 0
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example, whose tests need einops (flake.nix) and torchmetrics (matrix.yaml)."""
    root = tmp_path_factory.mktemp("wheelhouse")
    kernel = shutil.copytree(REPO / "examples" / "img2gray", root / "img2gray")
    shutil.rmtree(kernel / "tests")
    write(kernel / "tests" / "test_needs.py", TESTS)
    write(kernel / "flake.nix", """
        {
          outputs = { self, kernel-builder }:
            kernel-builder.lib.genKernelFlakeOutputs { pythonCheckInputs = ps: [ ps.einops ]; };
        }
    """)
    write(root / "matrix.yaml", """
        kernels:
          - path: img2gray
            version: 1.0.0
            tests: {requires: [torchmetrics]}
        torch: ["2.11"]
        cuda:
          "13.0":
            sms: ["9.0"]
    """)
    return root


def built(project: Path, out: str, *args: str,
          env: dict[str, str]) -> tuple[int, str, dict[str, Any]]:
    result = run_factory("build", "matrix.yaml", "--out", out, "--runner", "local", "--test",
                         *args, cwd=project, env=env)
    recorded = project / out / ".factory/cells/img2gray-cu130torch211-x86_64.json"
    state = json.loads(recorded.read_text()) if recorded.is_file() else {}
    return result.exit, result.stdout + result.stderr, state


def test_a_wheelhouse_made_here_proves_wheels_where_there_is_no_network(project: Path,
        factory_cache: Path, tmp_path: Path) -> None:
    env = cache_env(factory_cache)
    status, output, state = built(project, "online", env=env)  # the torch environment too
    assert status == 0 and state["tests"]["verdict"] == "proven", output

    made = run_factory("wheelhouse", "matrix.yaml", "wh", cwd=project, env=env)
    assert made.exit == 0, made.stdout + made.stderr
    wheels = {path.name.split("-")[0].lower() for path in (project / "wh").glob("*.whl")}
    assert {"einops", "pytest", "pluggy", "iniconfig", "torchmetrics", "lightning_utilities",
            "numpy"} <= wheels, wheels
    assert not wheels & {"torch", "sympy", "triton", "nvidia_cublas"}, wheels
    assert "left out, as they come with torch: " in made.stdout and "sympy" in made.stdout
    numpy = next((project / "wh").glob("numpy-*.whl")).name.split("-")[1]

    # what a target already has (its pip freeze) is not downloaded again
    write(tmp_path / "freeze.txt", f"numpy=={numpy}\ntorch==2.11.0+cu130\n")
    again = run_factory("wheelhouse", "matrix.yaml", tmp_path / "wh2", "--installed",
                        tmp_path / "freeze.txt", cwd=project, env=env)
    assert again.exit == 0, again.stdout + again.stderr
    assert "left out, as the target has them (--installed): numpy" in again.stdout
    assert not list((tmp_path / "wh2").glob("numpy-*.whl"))

    # no network, an empty uv cache: the wheelhouse is all there is
    offline = {**env, "UV_CACHE_DIR": str(tmp_path / "empty-uv-cache")}
    status, output, state = built(project, "air-gapped", "--offline", "--wheelhouse", "wh",
                                  env=offline)
    assert status == 0, output
    tests = state["tests"]
    assert (tests["verdict"], tests["passed"], tests["failed"]) == ("proven", 1, 0), tests
    assert tests["stand_ins"] == ["someone-else/img2gray-fork"]
    log = (project / "air-gapped" / "logs" / "img2gray-cu130torch211-x86_64.log").read_text()
    assert "the tests asked kernels.get_kernel for 'someone-else/img2gray-fork': given the " \
           "kernel under test (img2gray)" in log
    assert f"--find-links={project / 'wh'}" in log

    # without it: untested, published all the same, and one line says why and what to do
    status, output, state = built(project, "no-wheelhouse", "--offline", env=offline)
    assert status == 0, output
    assert state["tests"]["verdict"] == "untested"
    assert state["tests"]["not_run"].startswith(
        "pytest cannot be had offline: uv's cache does not hold it (asked for by the factory's "
        "test runner: pytest): give it in a --wheelhouse folder")
    assert list((project / "no-wheelhouse" / "files").glob("*.whl"))
    browse = json.loads((project / "no-wheelhouse" / "browse" / "img2gray.json").read_text())
    assert browse["versions"][0]["cells"][0]["tests"]["verdict"] == "untested"

    # where tests are required, it is not published, and the run fails
    status, output, _ = built(project, "required", "--offline", "--require-tests", env=offline)
    assert status == 1 and not list((project / "required" / "files").glob("*.whl")), output
    assert "0 built, 0 unchanged, 0 failed, 1 untested, 0 skipped" in output


def test_a_machines_own_interpreter_lends_the_tests_what_it_has(project: Path, factory_cache: Path,
        torch_venv: Path, tmp_path: Path) -> None:
    """With --torch-python, the interpreter's packages count as installed: its pytest serves
    the tests offline, with an empty uv cache and a wheelhouse that holds no pytest."""
    lean = tmp_path / "lean"
    lean.mkdir()
    for wheel in (project / "wh").glob("*.whl"):
        if not wheel.name.startswith(("pytest-", "pluggy-", "iniconfig-", "pygments-")):
            shutil.copy2(wheel, lean)
    offline = {**cache_env(factory_cache), "UV_CACHE_DIR": str(tmp_path / "empty-uv-cache")}
    status, output, state = built(project, "machine", "--offline", "--wheelhouse", str(lean),
                                  "--torch-python", str(torch_venv / "bin" / "python"),
                                  env=offline)
    assert status == 0, output
    assert (state["tests"]["verdict"], state["tests"]["passed"]) == ("proven", 1), state["tests"]
