"""A pure-Python wheel for all (tests/fixtures/noarch-kernel, with tests of its own) proven
where its users run it: imported and tested in each CUDA cell of the matrix with that cell's
torch, each cell's verdict recorded, on the browse page and by the doctor; a test that fails
in a cell keeps the wheel out."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from factory import doctor
from factory.cells.state import CellState
from factory.outputs.layout import Layout

from ..support.factory import FIXTURES, cache_env, run_factory, write
from ..support.wheels import GPU_FACTS

pytestmark = pytest.mark.slow

CELL = "noarch-kernel/cu130torch211/x86_64"
WHEEL = "noarch_kernel-2.0.0-py3-none-any.whl"
TEST = """
import torch

import noarch_kernel


def test_double():
    assert noarch_kernel.double(torch.ones(2)).tolist() == [{expected}, {expected}]
"""


def kernel_with_tests(folder: Path, expected: float) -> Path:
    kernel = shutil.copytree(FIXTURES / "noarch-kernel", folder / "noarch-kernel")
    write(kernel / "tests" / "test_double.py", TEST.format(expected=expected))
    write(folder / "matrix.yaml", """
        kernels: [{path: noarch-kernel, version: 2.0.0}]
        torch: ["2.11"]
        cuda: {"13.0": {sms: ["9.0"]}}
    """)
    return kernel


def test_a_pure_python_wheel_is_proven_in_each_cuda_cell(tmp_path: Path,
                                                          factory_cache: Path) -> None:
    kernel_with_tests(tmp_path, 2.0)
    done = run_factory("build", "matrix.yaml", "--test", cwd=tmp_path,
                       env=cache_env(factory_cache))
    assert done.exit == 0, done.stdout + done.stderr
    out = tmp_path / "index"
    log = (out / "logs" / "noarch-kernel-noarch.log").read_text()
    assert f"==> proving the wheel in {CELL} (torch 2.11, CUDA 13.0)" in log, log
    assert "kernel tests: proven: 1 passed, 0 failed, 0 skipped" in log, log
    project = json.loads((out / "browse" / "noarch-kernel.json").read_text())
    (release,) = project["versions"]
    (cell,) = release["cells"]
    assert (cell["label"], cell["torch"], cell["cuda"]) == ("cu130torch211", "2.11", "13.0")
    assert [wheel["filename"] for wheel in cell["wheels"]] == [WHEEL]
    assert cell["tests"]["passed"] == 1 and cell["served_by"] == "noarch-kernel/noarch"
    assert [op["name"].split("::")[1] for op in cell["ops"]] == ["double"]
    (anywhere,) = release["anywhere"]
    assert anywhere["filename"] == WHEEL and anywhere["tests"]["passed"] == 1
    # the doctor, on a machine with that torch, names the cell's index and its verdict
    (result,) = doctor.diagnose(out.as_uri() + "/", "noarch-kernel", GPU_FACTS)  # torch 2.11
    assert result["fits"]["wheel"] == WHEEL and result["fits"]["label"] == "cu130torch211"
    assert "  proven: 1 of its own tests passed with no GPU" in \
        doctor.describe_diagnosis([result])
    # factory test runs them again, in the same cell, and keeps that cell's import gate
    again = run_factory("test", "matrix.yaml", "--out", out, cwd=tmp_path,
                        env=cache_env(factory_cache))
    assert again.exit == 0, again.stdout + again.stderr
    state = CellState.read(Layout(out).state_file("noarch-kernel-noarch"))
    assert state is not None and state.tests is not None and state.tests.verdict == "proven"
    (proof,) = state.proofs
    assert proof.cell == CELL and proof.loaded is not None
    assert proof.tests is not None and proof.tests.passed == 1


def test_a_test_that_fails_in_a_cell_keeps_the_wheel_out(tmp_path: Path,
                                                         factory_cache: Path) -> None:
    kernel_with_tests(tmp_path, 3.0)
    done = run_factory("build", "matrix.yaml", "--test", cwd=tmp_path,
                       env=cache_env(factory_cache))
    assert done.exit == 1
    assert f"failed the kernel's tests in {CELL}: 0 passed, 1 failed" in done.stdout, done.stdout
    assert not list((tmp_path / "index" / "files").glob("*.whl"))
