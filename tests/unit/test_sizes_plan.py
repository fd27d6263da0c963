"""Size settings as data: how each GPU code compression mode reaches nvcc per CUDA major, the
size limits and hosts' presets, and the compression a matrix gives each kernel's cells."""

from __future__ import annotations

from pathlib import Path

from ..support.plans import kernel, plan_of


def test_the_matrix_compresses_every_kernel_unless_one_says_otherwise(tmp_path: Path) -> None:
    kernel(tmp_path, "one")
    kernel(tmp_path, "two")
    matrix = """
        kernels: [{path: one, version: 1.0.0}, {path: two, version: 1.0.0%s}]
        torch: ["2.11"]
        cuda: {"13.0": {sms: ["9.0"]}}
        %s
    """
    plan = plan_of(tmp_path, matrix % ("", ""))
    assert [cell.compress for cell in plan.cells] == ["size", "size"]
    plan = plan_of(tmp_path, matrix % (", compress: none", "compress: balance"))
    assert [cell.compress for cell in plan.cells] == ["balance", "none"]
    assert plan.matrix.max_wheel_size is None
