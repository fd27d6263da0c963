"""Pure-Python kernels that compile their GPU code when they run (triton, CuTe DSL, TVM FFI):
a wheel per cell, labelled as the cell's, pinned to its torch, requiring its CUDA major's build
of their dependencies, and imported (then tested, where a GPU is) on the cell's torch; a kernel
that also serves other backends stays one wheel for all."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ..support.factory import REPO, cache_env, run_factory, write
from ..support.installs import read_dist_info

FIXTURES = REPO / "tests" / "fixtures"


def test_a_cutlass_dsl_kernel_is_planned_per_cell_for_its_cuda_major(tmp_path: Path,
        factory_cache: Path) -> None:
    kernel = shutil.copytree(FIXTURES / "noarch-kernel", tmp_path / "dsl-kernel")
    (kernel / "torch-ext" / "noarch_kernel").rename(kernel / "torch-ext" / "dsl_kernel")
    build_toml = kernel / "build.toml"
    build_toml.write_text(build_toml.read_text().replace('backends = ["cuda", "cpu"]',
                                                         'backends = ["cuda"]')
                          .replace('name = "noarch-kernel"', 'name = "dsl-kernel"'))
    write(tmp_path / "matrix.yaml", f"""
        kernels:
          - {{path: dsl-kernel, version: 1.0.0}}
          - {{path: {FIXTURES / "noarch-kernel"}, version: 1.0.0}}
        torch: ["2.10", "2.11"]
        cuda: {{"12.8": {{sms: ["9.0"]}}, "13.0": {{sms: ["9.0"]}}}}
        platforms: [x86_64, aarch64]
    """)
    result = run_factory("plan", "matrix.yaml", cwd=tmp_path,
                         env=cache_env(factory_cache))
    assert result.exit == 0, result.stdout + result.stderr
    plan = json.loads(result.stdout[result.stdout.index("{"):])
    cells = sorted(cell for job in plan["jobs"] for cell in job["cells"])
    # cuda and cpu: one wheel for all; CUDA alone: a wheel per cell a torch of PyPI builds,
    # the x86_64 cell standing for aarch64 too (the wheel is py3-none-any)
    assert cells == ["dsl-kernel/cu128torch210/x86_64", "dsl-kernel/cu130torch211/x86_64",
                     "noarch-kernel/noarch"]
    assert sorted(plan["skipped"]) == ["dsl-kernel/cu128torch211/x86_64",
                                       "dsl-kernel/cu130torch210/x86_64"]


@pytest.mark.slow
def test_a_triton_kernel_gets_a_wheel_per_cell_proven_on_its_torch(tmp_path: Path,
        factory_cache: Path) -> None:
    write(tmp_path / "matrix.yaml", f"""
        kernels:
          - {{path: {FIXTURES / "triton-add"}, version: 1.0.0}}
          - {{path: {FIXTURES / "noarch-kernel"}, version: 1.0.0}}
        torch: ["2.11"]
        cuda: {{"13.0": {{sms: ["9.0"]}}}}
    """)
    result = run_factory("build", "matrix.yaml", cwd=tmp_path, env=cache_env(factory_cache))
    assert result.exit == 0, result.stdout + result.stderr
    names = sorted(w.name for w in (tmp_path / "index" / "files").glob("*.whl"))
    assert names == ["noarch_kernel-1.0.0-py3-none-any.whl",
                     "triton_add-1.0.0+cu130torch211-py3-none-any.whl"]
    wheel = tmp_path / "index" / "files" / names[1]
    assert "Requires-Dist: torch==2.11.*" in read_dist_info(wheel, "METADATA")
    log = (tmp_path / "index" / "logs" / "triton-add-cu130torch211-x86_64.log").read_text()
    assert "imported triton_add with torch 2.11" in log
    assert (tmp_path / "index" / "cu130torch211" / "simple" / "triton-add").is_dir()
