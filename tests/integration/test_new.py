"""`--new INDEX`: the plan (and a build's job) leaves out the cells whose wheel an index already
has, by distribution, exact version with its label, platform and, for per-Python cells,
CPython; what is left is what a scheduled run builds. (tests/integration/test_action.py runs
it against a served site in the reusable workflow.)"""

from __future__ import annotations

import json
from pathlib import Path

from ..support.factory import REPO, run_factory, write


def plan_cells(matrix: Path, *arguments: str | Path) -> tuple[list[str], str]:
    result = run_factory("plan", matrix, *arguments)
    assert result.exit == 0, result.stdout + result.stderr
    return list(json.loads(result.stdout)["cells"]), result.stderr


def test_the_cells_an_index_has_are_left_out(tmp_path: Path) -> None:
    matrix = write(tmp_path / "matrix.yaml", f"""
        kernels:
          - {{path: {REPO / "examples" / "img2gray"}, version: 1.0.0}}
          - {{path: {REPO / "examples" / "relu-scale"}}}
        torch: ["2.11", "2.12"]
        cuda: {{"13.0": {{sms: ["9.0"]}}}}
        python: ["3.11", "3.13"]
    """)
    index = tmp_path / "index" / "files"
    index.mkdir(parents=True)
    for name in ("img2gray-1.0.0+cu130torch211-cp39-abi3-manylinux_2_28_x86_64.whl",
                 "relu_scale-1.0.0+cu130torch212-cp311-cp311-manylinux_2_28_x86_64.whl",
                 # another version, another platform, another kernel: none is a cell's
                 "img2gray-0.9.0+cu130torch212-cp39-abi3-manylinux_2_28_x86_64.whl",
                 "relu_scale-1.0.0+cu130torch211-cp313-cp313-manylinux_2_28_aarch64.whl",
                 "other-1.0.0+cu130torch211-py3-none-any.whl", "not a wheel.whl"):
        (index / name).write_bytes(b"")
    every, _ = plan_cells(matrix)
    cells, said = plan_cells(matrix, "--new", tmp_path / "index")
    assert sorted(set(every) - set(cells)) == ["img2gray/cu130torch211/x86_64",
                                               "relu-scale/cu130torch212/x86_64/cp311"]
    assert len(every) == 6
    assert f"--new: 2 cell(s) already in {tmp_path / 'index'}, 4 to build" in said
    jobs = run_factory("plan", matrix, "--new", tmp_path / "index", "--format", "github")
    assert sum(job["cells"] for job in json.loads(jobs.stdout)["include"]) == 4


def test_new_refuses_what_it_cannot_read(tmp_path: Path) -> None:
    matrix = write(tmp_path / "matrix.yaml", f"""
        kernels: [{{path: {REPO / "examples" / "img2gray"}, version: 1.0.0}}]
        torch: ["2.11"]
        cuda: {{"13.0": {{sms: ["9.0"]}}}}
    """)
    cases: list[tuple[list[str | Path], str]] = [
            (["--new", tmp_path], f"error: {tmp_path}: --new: is neither an index URL (http:// "
                                  "or https://) nor a factory output folder"),
            (["--new", "https://ci:s3cret@example.org/"], "error: --new: 'https://***@example.org/'"
                                                          " holds a password"),
            (["--new", "https://example.org/", "--offline"],
             "error: --new: a URL cannot be read with --offline; give an output folder")]
    for arguments, message in cases:
        result = run_factory("plan", matrix, *arguments)
        assert result.exit == 2 and result.stderr.startswith(message), result.stderr
        assert "s3cret" not in result.stdout + result.stderr
