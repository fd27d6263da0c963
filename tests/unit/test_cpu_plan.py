"""CPU cells (`cpu:` in the matrix) in plans: which kernels get them, their labels, the cells
skipped and why, the CI jobs that carry them and the cell record that makes them again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from factory.cells.kinds import kind_of
from factory.config.buildtoml import read_build_toml
from factory.errors import ConfigError
from factory.plan.codec import cell_from_record, cell_record
from factory.plan.jobs import plan_jobs
from factory.plan.model import Cell, Plan
from factory.sources.facts import read_facts

from ..support.factory import make_kernel
from ..support.plans import folder_tree
from ..support.plans import plan_of as plan_matrix_of

BOTH = """
[general]
name = "both"
version = 1
license = "MIT"
backends = ["cuda", "cpu"]

[torch]
src = ["b.cpp"]

[kernel.gpu]
backend = "cuda"
depends = ["torch"]
src = ["k.cu", "c.cpp"]

[kernel.host]
backend = "cpu"
depends = ["torch"]
include = ["inc"]
cxx-flags = ["-mavx2"]
src = ["c.cpp", "h.cpp"]
"""

CPU_ONLY = """
[general]
name = "cpu-only"
version = 1
license = "MIT"
backends = ["cpu"]

[torch]
src = ["b.cpp"]

[kernel.host]
backend = "cpu"
depends = ["torch"]
src = ["h.cpp"]
"""

MATRIX = """
    kernels: [{path: both, version: 1.0.0}, {path: cpu-only, version: 1.0.0}]
    torch: ["2.10", "2.11"]
    cuda: {"13.0": {sms: ["9.0"], torch-index: "https://download.pytorch.org/whl/cu130"}}
"""


def plan_of(tmp_path: Path, extra: str, host: str | None = "x86_64") -> Plan:
    make_kernel(tmp_path / "both", BOTH, {"b.cpp": "", "k.cu": "", "c.cpp": "", "h.cpp": "",
                                          "inc/x.h": ""},
                package="both")
    make_kernel(tmp_path / "cpu-only", CPU_ONLY, {"b.cpp": "", "h.cpp": ""}, package="cpu_only")
    return plan_matrix_of(tmp_path, MATRIX + extra, host)


def test_without_cpu_the_cpu_backends_are_not_built(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, "")
    assert sorted(c.id for c in plan.cells) == ["both/cu130torch210/x86_64",
                                                "both/cu130torch211/x86_64"]
    assert {s.id: s.reason for s in plan.skipped}["cpu-only/cu130torch211/x86_64"] == \
        "the kernel has no CUDA backend (backends: cpu)"


def test_cpu_gives_each_kernel_with_a_cpu_backend_a_cell_per_torch(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, "    cpu: true\n")
    cells = {c.id: c for c in plan.cells}
    assert sorted(cells) == [
        "both/cputorch210/x86_64", "both/cputorch211/x86_64", "both/cu130torch210/x86_64",
        "both/cu130torch211/x86_64", "cpu-only/cputorch210/x86_64",
        "cpu-only/cputorch211/x86_64"]
    cpu = cells["both/cputorch211/x86_64"]
    assert cpu.backend == "cpu" and cpu.cuda is None and cpu.label == "cputorch211"
    assert cpu.wheel_version == "1.0.0+cputorch211" and cpu.torch_pin == "==2.11.*"
    assert not cpu.gpu_code and cpu.cpu_index is None
    units = {unit.source: unit for unit in cpu.units}
    assert sorted(units) == ["b.cpp", "c.cpp", "h.cpp"]  # the CPU section's, not k.cu
    assert units["h.cpp"].cxx_flags == ("-mavx2",) and units["h.cpp"].include == ("inc",)
    assert cells["both/cu130torch211/x86_64"].backend == "cuda"


def test_a_cpu_torch_index_is_the_cells_and_other_platforms_are_skipped(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, "    cpu: {torch-index: https://download.pytorch.org/whl/cpu}\n"
                             "    platforms: [x86_64, aarch64]\n"
                             "    exclude: [{kernel: both, torch: '2.10'}]\n")
    cpu = [c for c in plan.cells if c.backend == "cpu"]
    assert {c.cpu_index for c in cpu} == {"https://download.pytorch.org/whl/cpu"}
    skipped = {s.id: s for s in plan.skipped}
    assert skipped["cpu-only/cputorch211/aarch64"].reason == \
        "a aarch64 cell needs a aarch64 machine; this one is x86_64"
    assert skipped["cpu-only/cputorch211/aarch64"].cpu
    assert "both/cputorch210/x86_64" not in {c.id for c in plan.cells}  # excluded


def test_cpu_cells_go_to_jobs_of_their_own_on_the_local_runner(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, "    cpu: true\n", host=None)
    jobs = {job.id: job.summary() for job in plan_jobs(plan)}
    assert jobs["cpu-x86_64-1"] == {"job": "cpu-x86_64-1", "cuda": "none",
                                    "platform": "x86_64", "runs-on": "ubuntu-24.04",
                                    "runner": "local", "cross": False, "cells": 4}
    assert jobs["cu130-x86_64-1"]["runner"] == "docker"


def test_the_cell_record_makes_the_cpu_cell_again(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, "    cpu: {torch-index: https://download.pytorch.org/whl/cpu}\n")
    cell = next(c for c in plan.cells if c.id == "both/cputorch211/x86_64")
    record = cell_record(cell)
    assert record["backend"] == "cpu" and record["cuda"] is None
    assert record["torch_index"] == "https://download.pytorch.org/whl/cpu"
    again = cell_from_record(record, cell.spec, cell.kind, cell.source, cell.version,
                             cell.facts, tmp_path / "r.json")
    assert again == cell
    with pytest.raises(ConfigError, match="the kernel has no CPU backend"):
        _no_cpu_backend(tmp_path, record)


def _no_cpu_backend(tmp_path: Path, record: dict[str, Any]) -> Cell:
    kernel = make_kernel(tmp_path / "gpu-only", BOTH.replace('["cuda", "cpu"]', '["cuda"]'),
                         {"b.cpp": "", "k.cu": "", "c.cpp": "", "h.cpp": "", "inc/x.h": ""},
                         package="both")
    spec = read_build_toml(kernel)
    return cell_from_record(record, spec, kind_of(spec), folder_tree(kernel), "1.0.0",
                            read_facts(spec), tmp_path / "r.json")
