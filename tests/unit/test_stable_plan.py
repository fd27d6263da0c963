"""Stable-ABI kernels, planned: one cell per CUDA major x platform built against the lowest
torch the matrix can build it with, whose wheel serves every cell of that CUDA major from that
torch on (index-only torches included); its pin, label and import guard."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from factory.cells.job import cell_guard
from factory.cells.options import BuildOptions
from factory.compile.generated import import_guard
from factory.defaults import host_platform
from factory.plan.jobs import plan_jobs, select_job

from ..support.checks import present
from ..support.plans import kernel as kernel_v4
from ..support.plans import plan_of

HOST = host_platform()
STABLE = '[torch.stable-abi]\ncuda = "2.11"'


def kernel(tmp_path: Path, name: str = "demo", **settings: str) -> Path:
    """test_matrix's kernel, in edition 5 (where stable-abi may be a per-backend table)."""
    root = kernel_v4(tmp_path, name, **settings)
    text = (root / "build.toml").read_text()
    (root / "build.toml").write_text(text.replace("[general]", "[general]\nedition = 5", 1))
    return root


def ids(items: Any) -> list[str]:
    return [item.id for item in items]


def test_one_cell_per_cuda_major_serves_every_later_torch(tmp_path: Path) -> None:
    kernel(tmp_path, torch_bounds=STABLE)
    plan = plan_of(tmp_path, """
        kernels: [{path: demo, version: 1.0.0}]
        torch: ["2.10", "2.11", "2.12", "2.13", {version: "2.16", index-only: true}]
        cuda: {"13.0": {sms: ["9.0"]}}
    """)
    (cell,) = plan.cells
    assert cell.id == f"demo/cu13.stable.torch2.11/{HOST}"
    assert cell.torch == Version("2.11") and str(present(cell.cuda).version) == "13.0"
    assert cell.wheel_version == "1.0.0+cu13.stable.torch2.11"
    assert cell.torch_pin == ">=2.11" and cell.stable_abi == Version("2.11")
    assert [(s.label, str(s.torch), s.by) for s in plan.served] == [
        (label, torch, cell.id) for label, torch in (
            ("cu130torch211", "2.11"), ("cu130torch212", "2.12"), ("cu130torch213", "2.13"),
            ("cu130torch216", "2.16"))]
    ((skipped, reason),) = [(s.id, s.reason) for s in plan.skipped]
    assert skipped == f"demo/cu130torch210/{HOST}"
    assert reason == "the kernel targets torch's stable ABI 2.11, newer than torch 2.10"


def test_each_cuda_major_gets_its_own_build_and_a_cell_pypi_cannot_build_is_still_served(
        tmp_path: Path) -> None:
    """torch 2.11 and 2.12 on PyPI are CUDA 13.0 builds: with a torch index for CUDA 12.8 the
    CUDA 12 wheel is built against 2.11 from it; without one it cannot be built at all, and
    its cells say why. Where one is built, it serves torch 2.12 with CUDA 12.8 too, whose
    builds only PyTorch's own index has."""
    kernel(tmp_path, torch_bounds=STABLE)
    matrix = """
        kernels: [{path: demo, version: 1.0.0}]
        torch: ["2.11", "2.12"]
        cuda:
          "12.8": {sms: ["9.0"]%s}
          "13.0": {sms: ["9.0"]}
    """
    plan = plan_of(tmp_path, matrix % "")
    assert ids(plan.cells) == [f"demo/cu13.stable.torch2.11/{HOST}"]
    assert [s.label for s in plan.served] == ["cu130torch211", "cu130torch212"]
    reasons = {s.id: s.reason for s in plan.skipped}
    assert sorted(reasons) == [f"demo/cu128torch211/{HOST}", f"demo/cu128torch212/{HOST}"]
    assert reasons[f"demo/cu128torch212/{HOST}"].startswith(
        f"no cell of CUDA 12 on {HOST} can build the stable-ABI wheel that serves it: torch "
        "2.11 on PyPI is a CUDA 13.0 build, not CUDA 12.8")
    plan = plan_of(tmp_path, matrix % ', torch-index: "https://download.pytorch.org/whl/cu128"')
    assert ids(plan.cells) == [f"demo/cu12.stable.torch2.11/{HOST}",
                               f"demo/cu13.stable.torch2.11/{HOST}"]
    assert str(present(plan.cells[0].cuda).version) == "12.8"
    assert [s.id for s in plan.serves(plan.cells[0].id)] == [
        f"demo/cu128torch211/{HOST}", f"demo/cu128torch212/{HOST}"]
    assert not plan.skipped


def test_the_lowest_buildable_torch_and_cuda_minor_are_built_against(tmp_path: Path) -> None:
    """An index-only torch is never built against: a stable ABI of 2.10 with the matrix's
    2.10 index-only builds against 2.11, whose wheel cannot serve 2.10; of two CUDA minors
    the older is built with (its wheel runs with the newer runtime, not the other way)."""
    kernel(tmp_path, torch_bounds='[torch.stable-abi]\ncuda = "2.10"')
    plan = plan_of(tmp_path, """
        kernels: [{path: demo, version: 1.0.0}]
        torch: [{version: "2.10", index-only: true}, "2.12", "2.11"]
        cuda:
          "13.2": {sms: ["9.0"], torch-index: "https://download.pytorch.org/whl/cu132"}
          "13.0": {sms: ["9.0"]}
    """)
    (cell,) = plan.cells
    assert (str(cell.torch), str(present(cell.cuda).version)) == ("2.11", "13.0")
    assert cell.torch_pin == ">=2.11" and cell.stable_abi == Version("2.10")
    assert sorted(s.label for s in plan.served) == [
        "cu130torch211", "cu130torch212", "cu132torch211", "cu132torch212"]
    assert {s.reason for s in plan.skipped} == {
        "the stable-ABI wheel for CUDA 13 is built against torch 2.11, the lowest the matrix "
        "can build it with (torch 2.10 is index-only in the matrix: nothing is compiled "
        "against it)"}


def test_the_kernels_torch_maxver_bounds_the_pin_and_the_cells(tmp_path: Path) -> None:
    kernel(tmp_path, torch_bounds=f'maxver = "2.12"\n{STABLE}')
    plan = plan_of(tmp_path, """
        kernels: [{path: demo, version: 1.0.0}]
        torch: ["2.11", "2.12", "2.13"]
        cuda: {"13.0": {sms: ["9.0"]}}
    """)
    (cell,) = plan.cells
    assert cell.torch_pin == ">=2.11,<2.13"
    assert [s.label for s in plan.served] == ["cu130torch211", "cu130torch212"]
    assert [s.reason for s in plan.skipped] == ["torch 2.13 is above the kernel's torch maxver "
                                                "2.12"]


def test_stable_abi_is_planned_per_backend(tmp_path: Path) -> None:
    """A stable ABI declared for another backend leaves the CUDA cells per torch."""
    kernel(tmp_path, backends='["cuda", "rocm"]',
           torch_bounds='[torch.stable-abi]\nrocm = "2.11"')
    plan = plan_of(tmp_path, """
        kernels: [{path: demo, version: 1.0.0}]
        torch: ["2.11", "2.12", {version: "2.16", index-only: true}]
        cuda: {"13.0": {sms: ["9.0"]}}
    """)
    assert ids(plan.cells) == [f"demo/cu130torch211/{HOST}", f"demo/cu130torch212/{HOST}"]
    assert [c.torch_pin for c in plan.cells] == ["==2.11.*", "==2.12.*"]
    assert not plan.served and all(c.stable_abi is None for c in plan.cells)
    assert [(s.id, s.reason) for s in plan.skipped] == [
        (f"demo/cu130torch216/{HOST}",
         "torch 2.16 is index-only in the matrix: nothing is compiled against it")]


def test_only_and_jobs_keep_a_stable_cell_with_the_cells_it_serves(tmp_path: Path) -> None:
    kernel(tmp_path, torch_bounds=STABLE)
    kernel(tmp_path, name="plain")
    plan = plan_of(tmp_path, """
        kernels: [{path: demo, version: 1.0.0}, {path: plain, version: 1.0.0}]
        torch: ["2.11", "2.12"]
        cuda: {"13.0": {sms: ["9.0"]}}
    """)
    chosen = plan.only(["*/cu130torch212/*"])
    assert ids(chosen.cells) == [f"demo/cu13.stable.torch2.11/{HOST}",
                                 f"plain/cu130torch212/{HOST}"]
    assert len(chosen.served) == 2
    assert not plan.only(["plain/*"]).served
    assert not plan.on_host("elsewhere").served
    (job,) = [job for job in plan_jobs(plan) if f"demo/cu13.stable.torch2.11/{HOST}" in job.cells]
    assert len(select_job(plan, job.id).served) == 2


def guard_verdict(guard: str, version: str, cuda: str | None) -> str | None:
    """Run an import guard against a torch of this version and CUDA (the guard reads
    torch.__version__ and torch.version.cuda, nothing else): None, or its ImportError."""
    torch = types.SimpleNamespace(__version__=version, version=types.SimpleNamespace(cuda=cuda))
    try:
        exec(compile(guard, "_ops.py", "exec"), {"torch": torch})
    except ImportError as exc:
        return str(exc)
    return None


def test_the_guard_accepts_every_torch_the_wheel_serves_and_names_the_rest(tmp_path: Path) -> None:
    kernel(tmp_path, torch_bounds=f'maxver = "2.14"\n{STABLE}')
    plan = plan_of(tmp_path, """
        kernels: [{path: demo, version: 1.0.0}]
        torch: ["2.11", "2.12"]
        cuda: {"13.0": {sms: ["9.0"]}}
    """)
    (cell,) = plan.cells
    guard = cell_guard(cell, BuildOptions(tmp_path, 0, index_url="https://kernels.example"))
    for version, cuda in (("2.11.0+cu130", "13.0"), ("2.13.1", "13.2"), ("2.14.0", "13.0")):
        assert guard_verdict(guard, version, cuda) is None, version
    head = "demo 1.0.0+cu13.stable.torch2.11 was built for torch 2.11 to 2.14 with CUDA 13, "
    assert guard_verdict(guard, "2.10.0+cu130", "13.0") == (
        head + "but this environment has torch 2.10.0+cu130 with CUDA 13.0. Install the demo "
        "wheel built for it, from the index https://kernels.example/cu130torch210/simple, or "
        "install torch 2.11 to 2.14 with CUDA 13.")
    assert guard_verdict(guard, "2.12.0+cu128", "12.8") == (
        head + "but this environment has torch 2.12.0+cu128 with CUDA 12.8. Install the demo "
        "wheel built for it, from the index https://kernels.example/cu128torch212/simple, or "
        "install torch 2.11 to 2.14 with CUDA 13.")
    assert "torch 2.15.0 with CUDA 13.0" in present(guard_verdict(guard, "2.15.0", "13.0"))
    assert "a build without CUDA" in present(guard_verdict(guard, "2.12.0+cpu", None))
    per_torch = import_guard("demo", "1.0.0+cu130torch211", "2.11", "13.0", "cu{cuda}torch{torch}")
    assert guard_verdict(per_torch, "2.11.0", "13.0") is None
    verdict = present(guard_verdict(per_torch, "2.12.0", "13.0"))
    assert "was built for torch 2.11 with CUDA 13" in verdict


@pytest.mark.parametrize("stable", ['"2.11"', '{cuda = "2.11"}'])
def test_both_stable_abi_spellings_make_a_stable_cell(tmp_path: Path, stable: str) -> None:
    kernel(tmp_path, torch_bounds=f"stable-abi = {stable}")
    plan = plan_of(tmp_path, """
        kernels: [{path: demo, version: 1.0.0}]
        torch: ["2.11", "2.12"]
        cuda: {"13.0": {sms: ["9.0"]}}
    """)
    assert ids(plan.cells) == [f"demo/cu13.stable.torch2.11/{HOST}"]
