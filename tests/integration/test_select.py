"""The request path: `--select field=glob,...` narrows `factory plan` and `factory build` to the
cells a request names (kernel, torch, CUDA, Python, platform), before the jobs are cut, so the
plan and every build job agree; cells a request names that cannot be built keep their reason."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from ..support.factory import EXAMPLE, run_factory, write
from ..support.plans import twelve_cells


def planned(matrix: Path, cache: Path, *selects: str) -> dict[str, Any]:
    result = run_factory("plan", matrix, "--cache-dir", cache,
                         *[part for text in selects for part in ("--select", text)])
    assert result.exit == 0, result.stderr
    planned: dict[str, Any] = json.loads(result.stdout)
    return planned


def test_select_narrows_the_plan_and_the_build_jobs_agree(tmp_path: Path) -> None:
    matrix, cache = twelve_cells(tmp_path), tmp_path / "cache"
    request = "kernel=img2gray,torch=2.1[23],platform=x86_64"
    plan = planned(matrix, cache, request)
    assert sorted(plan["cells"]) == ["img2gray/cu130torch212/x86_64",
                                     "img2gray/cu130torch213/x86_64"]
    assert [job["job"] for job in plan["jobs"]] == ["cu130-x86_64-1"]
    # a build job given the same request sees the same jobs
    build = run_factory("build", matrix, "--cache-dir", cache, "--out", tmp_path / "index",
                        "--select", request, "--job", "cu130-aarch64-1")
    assert build.exit == 2 and "no job 'cu130-aarch64-1' in this plan (jobs: " \
        "cu130-x86_64-1)" in build.stderr, build.stderr
    assert not (tmp_path / "index").exists()
    # several requests: any of them; a blank field of a run form is *
    either = planned(matrix, cache, "kernel=multikernel,torch=2.11,platform=aarch64",
                     "kernel=img2gray,torch=2.13,cuda=*,python=*,platform=x86_64")
    assert sorted(either["cells"]) == ["img2gray/cu130torch213/x86_64",
                                       "multikernel/cu130torch211/aarch64"]


def test_python_selects_per_python_cells_and_the_abi3_cells_that_serve_it(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLE, tmp_path / "img2gray")
    shutil.copytree(EXAMPLE.parent / "relu-scale", tmp_path / "relu-scale")
    matrix = write(tmp_path / "matrix.yaml", """
        kernels:
          - path: img2gray
            version: 1.0.0
          - path: relu-scale
            version: 1.0.0
        torch: ["2.11"]
        cuda:
          "13.0":
            sms: ["9.0"]
        python: ["3.11", "3.12"]
        """)
    plan = planned(matrix, tmp_path / "cache", "python=3.12")
    assert sorted(plan["cells"]) == ["img2gray/cu130torch211/x86_64",
                                     "relu-scale/cu130torch211/x86_64/cp312"]


def test_a_request_for_cells_that_cannot_be_built_keeps_their_reason(tmp_path: Path) -> None:
    matrix = twelve_cells(tmp_path)
    text = matrix.read_text().replace('sms: ["8.0", "9.0"]',
                                      'sms: ["8.0", "9.0"]\n  "12.8":\n    sms: ["9.0"]')
    matrix.write_text(text)
    plan = planned(matrix, tmp_path / "cache", "kernel=img2gray,cuda=12.8,platform=x86_64")
    assert plan["cells"] == {}
    assert sorted(plan["skipped"]) == [f"img2gray/cu128torch2{minor}/x86_64"
                                       for minor in (11, 12, 13)]
    assert all("torch-index" in reason for reason in plan["skipped"].values()), plan["skipped"]


def test_bad_requests_are_one_line(tmp_path: Path) -> None:
    matrix = twelve_cells(tmp_path)
    for select, expected in [
        ("torch", "--select: 'torch' is not field=GLOB (e.g. torch=2.11; fields: kernel, "
                  "torch, cuda, python, platform)"),
        ("arch=x86_64", "--select: unknown field 'arch'"),
        ("torch=2.11,torch=2.12", "--select: 'torch=2.11,torch=2.12' names a field twice"),
        ("torch=2.11;rm -rf /", "is not field=GLOB"),
        ("kernel=nope", "--select: 'kernel=nope' matches no cell of the matrix"),
    ]:
        for command in ("plan", "build"):
            result = run_factory(command, matrix, "--cache-dir", tmp_path / "cache",
                                 *(["--out", str(tmp_path / "index")]
                                   if command == "build" else []),
                                 "--select", select)
            assert result.exit == 2, (command, select, result.stderr)
            # one error line (after the plan's notes about the matrix, if any)
            (line,) = [line for line in result.stderr.splitlines()
                       if not line.startswith("note: ")]
            assert line.startswith("error: ") and expected in line, line
            assert not (tmp_path / "index").exists()
