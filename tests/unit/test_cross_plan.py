"""Cross-compiled cells (`cross: true`) in plans: which cells an x86_64 machine builds for
aarch64, which an aarch64 machine builds natively, the CI jobs that carry them and the cell
record that says so."""

from __future__ import annotations

from pathlib import Path

from factory.plan.codec import cell_from_record, cell_record
from factory.plan.jobs import plan_jobs
from factory.plan.model import Plan

from ..support.plans import kernel, plan_of

MATRIX = """
    kernels: [{path: demo, version: 1.0.0}]
    torch: ["2.11"]
    cuda: {"13.0": {sms: ["9.0"]}}
    platforms: [x86_64, aarch64]
"""


def plan_on(tmp_path: Path, host: str | None, extra: str = "") -> Plan:
    kernel(tmp_path)
    return plan_of(tmp_path, MATRIX + extra, host)


def test_without_cross_an_x86_64_machine_skips_the_aarch64_cells(tmp_path: Path) -> None:
    plan = plan_on(tmp_path, "x86_64")
    assert [c.id for c in plan.cells] == ["demo/cu130torch211/x86_64"]
    (skipped,) = plan.skipped
    assert skipped.id == "demo/cu130torch211/aarch64"
    assert skipped.reason == "a aarch64 cell needs a aarch64 machine; this one is x86_64"


def test_with_cross_an_x86_64_machine_builds_the_aarch64_cells(tmp_path: Path) -> None:
    plan = plan_on(tmp_path, "x86_64", "    cross: true\n")
    cells = {c.id: c for c in plan.cells}
    assert set(cells) == {"demo/cu130torch211/x86_64", "demo/cu130torch211/aarch64"}
    assert cells["demo/cu130torch211/aarch64"].cross
    assert not cells["demo/cu130torch211/x86_64"].cross
    assert not plan.skipped
    assert {c.id for c in plan.on_host("x86_64").cells} == set(cells)


def test_an_aarch64_machine_builds_its_own_cells_natively(tmp_path: Path) -> None:
    plan = plan_on(tmp_path, "aarch64", "    cross: true\n")
    assert [(c.id, c.cross) for c in plan.cells] == [("demo/cu130torch211/aarch64", False)]
    assert [s.id for s in plan.skipped] == ["demo/cu130torch211/x86_64"]


def test_a_ci_plan_puts_the_cross_cells_in_jobs_for_x86_64_runners(tmp_path: Path) -> None:
    plan = plan_on(tmp_path, None, "    cross: true\n")
    jobs = {job.id: job.summary() for job in plan_jobs(plan)}
    assert jobs["cu130-aarch64-cross-1"] == {
        "job": "cu130-aarch64-cross-1", "cuda": "13.0", "platform": "aarch64",
        "runs-on": "ubuntu-24.04", "runner": "local", "cross": True, "cells": 1}
    assert jobs["cu130-x86_64-1"]["runner"] == "docker"
    # the job's machine keeps its cell, as an aarch64 machine would keep a native one
    job_plan = plan.select({"demo/cu130torch211/aarch64"})
    assert [c.id for c in job_plan.on_host("x86_64").cells] == ["demo/cu130torch211/aarch64"]
    assert not job_plan.on_host("aarch64").skipped


def test_a_native_aarch64_plan_keeps_arm_runners(tmp_path: Path) -> None:
    plan = plan_on(tmp_path, None)
    jobs = {job.id: job.summary() for job in plan_jobs(plan)}
    assert jobs["cu130-aarch64-1"]["runs-on"] == "ubuntu-24.04-arm"
    assert jobs["cu130-aarch64-1"]["runner"] == "docker"


def test_the_cell_record_says_it_was_cross_compiled(tmp_path: Path) -> None:
    plan = plan_on(tmp_path, "x86_64", "    cross: true\n")
    (cell,) = [c for c in plan.cells if c.cross]
    record = cell_record(cell)
    assert record["cross"] is True and record["platform"] == "aarch64"
    again = cell_from_record(record, cell.spec, cell.kind, cell.source, cell.version,
                             cell.facts, tmp_path / "r.json")
    assert again.cross and cell_record(again) == record
    native = next(c for c in plan.cells if not c.cross)
    assert "cross" not in cell_record(native)
