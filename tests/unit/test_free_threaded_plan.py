"""Free-threaded cells planned, recorded and compiled (command lines only): a kernel-builder
kernel's cp314t cell has no limited API, its own extension name and wheel tags, and its record
reads back; `--new` tells its wheel from the abi3 one of the same label."""

from __future__ import annotations

import json
from pathlib import Path

from factory.compile.commands import compile_jobs, extension_suffix, python_tags
from factory.compile.generated import REGISTRATION_HEADER
from factory.index.new import unpublished
from factory.plan.codec import cell_from_record, cell_record
from factory.values.pythons import CPython

from ..support.factory import EXAMPLE, FIXTURES
from ..support.plans import TOOLCHAIN, plan_of

MATRIX = f"""
kernels:
  - path: {EXAMPLE}
    version: 1.0.0
    needs-gil: true
torch: ["2.15"]
cuda: {{"13.2": {{sms: ["9.0"]}}}}
python: ["3.14t"]
"""


def test_a_kernel_builder_kernel_gets_an_abi3_cell_and_a_free_threaded_one(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, MATRIX)
    abi3, free = plan.cells
    assert (abi3.id, free.id) == ("img2gray/cu132torch215/x86_64",
                                  "img2gray/cu132torch215/x86_64/cp314t")
    assert (abi3.python, abi3.per_python, abi3.free_threaded) == (None, False, False)
    assert (free.python, free.per_python, free.free_threaded) == (CPython.parse("3.14t"), True,
                                                                  True)
    assert (extension_suffix(abi3), python_tags(abi3)) == (".abi3.so", "cp39-abi3")
    assert (extension_suffix(free), python_tags(free)) == (
        ".cpython-314t-x86_64-linux-gnu.so", "cp314-cp314t")
    for cell, limited in ((abi3, True), (free, False)):
        for job in compile_jobs(cell, TOOLCHAIN, Path("/build")):
            assert any(arg.startswith("-DPy_LIMITED_API=") for arg in job.command()) == limited
    # the module it registers declares that it runs without the GIL, where there is none
    assert "PyUnstable_Module_SetGIL((module), Py_MOD_GIL_NOT_USED)" in REGISTRATION_HEADER
    assert REGISTRATION_HEADER.index("#ifdef Py_GIL_DISABLED") < \
        REGISTRATION_HEADER.index("PyUnstable_Module_SetGIL")


def test_a_free_threaded_cell_survives_its_record(tmp_path: Path) -> None:
    _, free = plan_of(tmp_path, MATRIX).cells
    record = json.loads(json.dumps(cell_record(free)))
    assert (record["python"], record["per_python"], record["needs_gil"]) == ("3.14t", True, True)
    again = cell_from_record(record, free.spec, free.kind, free.source, free.version,
                             free.facts, free.spec.build_toml)
    assert (again.id, again.python, again.per_python, again.needs_gil) == (
        free.id, free.python, True, True)
    assert cell_record(again) == cell_record(free)


def test_new_tells_the_free_threaded_wheel_from_the_abi3_one(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, MATRIX)
    name = "img2gray-1.0.0+cu132torch215-{}-manylinux_2_34_x86_64.whl"
    _, present = unpublished(plan, [name.format("cp314-cp314t")])
    assert present == ["img2gray/cu132torch215/x86_64/cp314t"]
    _, present = unpublished(plan, [name.format("cp39-abi3")])
    assert present == ["img2gray/cu132torch215/x86_64"]


def test_stable_abi_and_cpu_cells_say_they_have_no_free_threaded_wheel(tmp_path: Path) -> None:
    stable = plan_of(tmp_path / "stable", f"""
kernels: [{{path: {FIXTURES / "stable-kernel"}, version: 1.0.0}}]
torch: ["2.11", "2.12"]
cuda: {{"13.0": {{sms: ["9.0"]}}}}
python: ["3.14t"]
""")
    (cell,) = stable.cells
    reasons = {skipped.id: skipped.reason for skipped in stable.skipped}
    assert reasons[f"{cell.id}/cp314t"] == (
        "the factory builds no free-threaded stable-ABI wheels yet, and their abi3 wheel cannot "
        "be loaded by free-threaded CPython 3.14t")
    cpu = plan_of(tmp_path / "cpu", MATRIX + "cpu: true\n")
    assert [cell.id for cell in cpu.cells] == [
        "img2gray/cu132torch215/x86_64", "img2gray/cu132torch215/x86_64/cp314t",
        "img2gray/cputorch215/x86_64"]
    assert [skipped.id for skipped in cpu.skipped] == ["img2gray/cputorch215/x86_64/cp314t"]
