"""matrix.yaml: defaults, labels, and the plan of cells (what is built, skipped and why)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from packaging.version import Version

from factory.config.matrix import load_matrix
from factory.defaults import host_platform

from ..support.checks import present
from ..support.factory import factory_main, make_kernel, write
from ..support.plans import kernel, plan_for


def test_cells_labels_and_sms(tmp_path: Path) -> None:
    kernel(tmp_path)
    plan = plan_for(tmp_path, """
        kernels: [{path: demo, version: 1.0.0}]
        torch: ["2.11", "2.12"]
        cuda:
          "13.0": {sms: ["9.0", "8.0"]}
    """)
    assert [c.id for c in plan.cells] == [f"demo/cu130torch211/{host_platform()}",
                                          f"demo/cu130torch212/{host_platform()}"]
    cell = plan.cells[0]
    assert cell.wheel_version == "1.0.0+cu130torch211"
    assert [str(c) for c in cell.sms] == ["8.0", "9.0+PTX"]
    assert cell.ops_namespace == f"_demo_{cell.source.revision[:7]}"
    assert [str(a) for a in cell.sections[0].archs] == ["8.0", "9.0+PTX"]


def test_label_template(tmp_path: Path) -> None:
    kernel(tmp_path)
    plan = plan_for(tmp_path, """
        kernels: [{path: demo, version: "2"}]
        torch: ["2.11"]
        cuda: {"13.0": {sms: ["9.0"]}}
        label: "cu{cuda_major}.{cuda_minor}.torch{torch_major}.{torch_minor}"
    """)
    assert plan.cells[0].wheel_version == "2+cu13.0.torch2.11"


def test_skips_say_why(tmp_path: Path) -> None:
    kernel(tmp_path, "bounded", torch_bounds='minver = "2.12"\nmaxver = "2.13"',
           cuda_bounds='maxver = "12.9"')
    kernel(tmp_path, "metal-only", backends='["metal"]')
    plan = plan_for(tmp_path, """
        kernels:
          - {path: bounded, version: 1.0.0}
          - {path: metal-only, version: 1.0.0}
        torch: ["2.11", "2.12", "2.14"]
        cuda:
          "12.8": {sms: ["9.0"], torch-index: "https://download.pytorch.org/whl/cu128"}
          "13.0": {sms: ["9.0"]}
    """)
    reasons = {s.id.rsplit("/", 1)[0]: s.reason for s in plan.skipped}
    assert reasons["bounded/cu128torch211"] == \
        "torch 2.11 is below the kernel's torch minver 2.12"
    assert reasons["bounded/cu130torch214"] == \
        "torch 2.14 is above the kernel's torch maxver 2.13"
    assert reasons["bounded/cu130torch212"] == \
        "CUDA 13.0 is above the kernel's CUDA maxver 12.9"
    assert reasons["metal-only/cu130torch211"] == \
        "the kernel has no CUDA backend (backends: metal)"
    assert [c.id.rsplit("/", 1)[0] for c in plan.cells] == ["bounded/cu128torch212"]


def test_torch_from_pypi_with_the_wrong_cuda_is_skipped(tmp_path: Path) -> None:
    kernel(tmp_path)
    plan = plan_for(tmp_path, """
        kernels: [{path: demo, version: 1.0.0}]
        torch: ["2.10", "2.11"]
        cuda: {"13.0": {sms: ["9.0"]}}
    """)
    assert [c.torch for c in plan.cells] == [Version("2.11")]
    (skipped,) = plan.skipped
    assert "torch 2.10 on PyPI is a CUDA 12.8 build, not CUDA 13.0; set " \
           "cuda.\"13.0\".torch-index" in skipped.reason


def test_other_platforms_are_skipped_here(tmp_path: Path) -> None:
    kernel(tmp_path)
    other = "aarch64" if host_platform() == "x86_64" else "x86_64"
    plan = plan_for(tmp_path, """
        kernels: [{path: demo, version: 1.0.0}]
        torch: ["2.11"]
        cuda: {"13.0": {sms: ["9.0"]}}
        platforms: [x86_64, aarch64]
    """)
    assert [s.id for s in plan.skipped] == [f"demo/cu130torch211/{other}"]


def test_excludes(tmp_path: Path) -> None:
    kernel(tmp_path)
    plan = plan_for(tmp_path, """
        kernels: [{path: demo, version: 1.0.0}]
        torch: ["2.11", "2.12", "2.13"]
        cuda: {"13.0": {sms: ["9.0"]}}
        exclude:
          - {torch: "2.12"}
          - {kernel: demo, torch: 2.13, cuda: 13.0}
    """)
    assert [str(c.torch) for c in plan.cells] == ["2.11"]
    assert plan.skipped == ()


def test_kernel_capabilities_and_sections(tmp_path: Path) -> None:
    kernel(tmp_path, caps='cuda-capabilities = ["8.0", "9.0a"]')
    plan = plan_for(tmp_path, """
        kernels: [{path: demo, version: 1.0.0}]
        torch: ["2.11"]
        cuda: {"13.0": {sms: ["8.0", "8.6", "9.0"]}}
    """)
    assert [str(a) for a in plan.cells[0].sections[0].archs] == ["8.0", "9.0a"]


def test_capabilities_the_toolkit_cannot_build_are_dropped(tmp_path: Path) -> None:
    kernel(tmp_path, caps='cuda-capabilities = ["7.0", "8.0"]')
    plan = plan_for(tmp_path, """
        kernels: [{path: demo, version: 1.0.0}]
        torch: ["2.11"]
        cuda: {"13.0": {sms: ["7.5", "8.0"]}}
    """)
    section = plan.cells[0].sections[0]
    assert [str(a) for a in section.archs] == ["8.0"]
    assert [str(a) for a in section.dropped] == ["7.0"]


def test_a_kernel_no_cell_of_the_matrix_can_build_is_skipped_and_the_rest_planned(
        tmp_path: Path) -> None:
    """A kernel whose capabilities fit no SM of any cell (a Blackwell-only kernel in a matrix of
    sm_90 cells) is skipped there with its reason; the other kernels plan as they would alone."""
    kernel(tmp_path, caps='cuda-capabilities = ["10.0"]')
    kernel(tmp_path, name="anywhere")
    both = plan_for(tmp_path, """
        kernels: [{path: demo, version: 1.0.0}, {path: anywhere, version: 1.0.0}]
        torch: ["2.11"]
        cuda: {"13.0": {sms: ["9.0"]}}
    """)
    (skipped,) = both.skipped
    assert skipped.id == "demo/cu130torch211/x86_64"
    assert skipped.reason == "[kernel.main] its cuda-capabilities (10.0) select no SM of the " \
                             "cell (9.0)"
    alone = plan_for(tmp_path, """
        kernels: [{path: anywhere, version: 1.0.0}]
        torch: ["2.11"]
        cuda: {"13.0": {sms: ["9.0"]}}
    """)
    assert [c.id for c in both.cells] == [c.id for c in alone.cells] == \
        ["anywhere/cu130torch211/x86_64"]


def test_factory_plan_lists_the_kernel_that_fits_no_cell_as_skipped(tmp_path: Path,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    kernel(tmp_path, caps='cuda-capabilities = ["10.0a", "12.0a"]')
    write(tmp_path / "matrix.yaml", """
        kernels: [{path: demo, version: 1.0.0}]
        torch: ["2.11"]
        cuda: {"13.0": {sms: ["9.0"]}}
    """)
    monkeypatch.chdir(tmp_path)
    planned = factory_main("plan", "matrix.yaml", capsys=capsys)
    assert planned.exit == 0, planned.stderr
    shown = json.loads(planned.stdout[planned.stdout.index("{"):])
    assert shown["cells"] == {}
    assert shown["skipped"] == {"demo/cu130torch211/x86_64": "[kernel.main] its "
                                "cuda-capabilities (10.0a 12.0a) select no SM of the cell (9.0)"}


def test_a_cell_whose_sms_the_kernel_cannot_use_is_skipped_and_the_rest_is_built(
        tmp_path: Path) -> None:
    kernel(tmp_path, name="blackwell", caps='cuda-capabilities = ["10.0"]')
    kernel(tmp_path, name="anywhere")
    plan = plan_for(tmp_path, """
        kernels: [{path: blackwell, version: 1.0.0}, {path: anywhere, version: 1.0.0}]
        torch: ["2.11"]
        cuda:
          "13.0": {sms: ["9.0"]}
          "13.1": {sms: ["9.0", "10.0"], torch-index: "https://download.pytorch.org/whl/cu131"}
        exclude: [{kernel: anywhere, cuda: "13.1"}]
    """)
    assert sorted(c.id for c in plan.cells) == ["anywhere/cu130torch211/x86_64",
                                                "blackwell/cu131torch211/x86_64"]
    (skipped,) = plan.skipped
    assert skipped.id == "blackwell/cu130torch211/x86_64"
    assert skipped.reason == "[kernel.main] its cuda-capabilities (10.0) select no SM of the " \
                             "cell (9.0)"


def test_a_section_that_selects_no_sm_is_left_out_of_the_cell(tmp_path: Path) -> None:
    make_kernel(tmp_path / "split", """
        [general]
        name = "split"
        backends = ["cuda"]
        [torch]
        src = ["b.cpp"]
        [kernel.hopper]
        backend = "cuda"
        depends = ["torch"]
        src = ["shared.cu", "hopper.cu"]
        cuda-capabilities = ["9.0a"]
        cuda-flags = ["-DHOPPER"]
        include = ["hopper"]
        [kernel.blackwell]
        backend = "cuda"
        depends = ["torch"]
        src = ["shared.cu", "blackwell.cu"]
        cuda-capabilities = ["10.0f"]
        cuda-flags = ["-DBLACKWELL"]
        include = ["blackwell"]
    """, {"b.cpp": "", "shared.cu": "", "hopper.cu": "", "blackwell.cu": "",
          "hopper/h.h": "", "blackwell/b.h": ""}, package="split")
    hopper_only = plan_for(tmp_path, """
        kernels: [{path: split, version: 1.0.0}]
        torch: ["2.11"]
        cuda: {"13.0": {sms: ["9.0"]}}
    """).cells[0]
    kept = {p.name: p for p in hopper_only.sections}
    assert kept["blackwell"].skipped and not kept["hopper"].skipped
    units = {u.source: u for u in hopper_only.units}
    assert sorted(units) == ["b.cpp", "hopper.cu", "shared.cu"]
    assert units["shared.cu"].cuda_flags == ("-DHOPPER",)
    both = plan_for(tmp_path, """
        kernels: [{path: split, version: 1.0.0}]
        torch: ["2.11"]
        cuda: {"13.0": {sms: ["9.0", "10.0"]}}
    """).cells[0]
    units = {u.source: u for u in both.units}
    # A source two sections list is compiled once, with what both ask for (as CMake does).
    assert sorted(units) == ["b.cpp", "blackwell.cu", "hopper.cu", "shared.cu"]
    shared = units["shared.cu"]
    assert [str(a) for a in shared.archs] == ["9.0a", "10.0f"]
    assert shared.cuda_flags == ("-DBLACKWELL", "-DHOPPER")
    assert shared.include == ("blackwell", "hopper")


def test_only_filters_by_glob(tmp_path: Path) -> None:
    kernel(tmp_path)
    plan = plan_for(tmp_path, """
        kernels: [{path: demo, version: 1.0.0}]
        torch: ["2.11", "2.12"]
        cuda: {"13.0": {sms: ["9.0"]}}
    """)
    assert [c.id for c in plan.only(["*torch212*"]).cells] == [
        f"demo/cu130torch212/{host_platform()}"]
    assert plan.only(["nothing*"]).cells == ()


def test_noarch_kernel_is_one_cell(tmp_path: Path) -> None:
    make_kernel(tmp_path / "pure", '[general]\nname = "pure"\nversion = 1\nlicense = "MIT"\n'
                'backends = ["cuda"]\n\n[torch-noarch]\n', package="pure")
    plan = plan_for(tmp_path, """
        kernels: [{path: pure, version: 3.1.4}]
        torch: ["2.11", "2.12"]
        cuda: {"13.0": {sms: ["9.0"]}, "12.8": {torch-index: "https://example.org/cu128"}}
    """)
    (cell,) = plan.cells
    assert (cell.id, cell.wheel_version, cell.label) == ("pure/noarch", "3.1.4", None)


SECTIONS = """
    [general]
    name = "sections"
    backends = ["cuda"]
    [torch]
    src = ["torch-ext/binding.cpp", "torch-ext/binding.h"]
    [kernel.hopper]
    backend = "cuda"
    depends = ["torch"]
    src = ["hopper.cu"]
    cuda-capabilities = ["9.0a"]
    [kernel.ampere]
    backend = "cuda"
    depends = ["torch"]
    src = ["ampere.cu", "ampere.h"]
    cuda-capabilities = ["{ampere}"]
    [kernel.ada]
    backend = "cuda"
    depends = ["torch"]
    src = ["ada.cu"]
    cuda-capabilities = ["8.9"]
    [kernel.blackwell]
    backend = "cuda"
    depends = ["torch"]
    src = ["blackwell.cu"]
    cuda-capabilities = ["10.0a"]
"""
SECTION_FILES = {
    "torch-ext/binding.cpp": '#include "binding.h"\n'
                             'TORCH_LIBRARY(ops, m) { m.impl("attn", &attn_wrap); }\n',
    "torch-ext/binding.h": "Tensor ampere_attn(Tensor q);\nTensor hopper_attn(Tensor q);\n"
                           "Tensor blackwell_attn(Tensor q);  // declared, never called\n"
                           "static Tensor attn_wrap(Tensor q) {\n"
                           "  return sm() >= 90 ? hopper_attn(q) : ampere_attn(q);\n}\n",
    "hopper.cu": "Tensor hopper_attn(Tensor q) { return q; }\n",
    "ampere.cu": '#include "ampere.h"\nTensor ampere_attn(Tensor q) { return ada_quant(q); }\n',
    "ampere.h": "Tensor ada_quant(Tensor q);\n",
    "ada.cu": "Tensor ada_quant(Tensor q) { return q; }\n",
    "blackwell.cu": "Tensor blackwell_attn(Tensor q) { return q; }\n",
}


def sections_kernel(tmp_path: Path, ampere: str = "8.0") -> None:
    make_kernel(tmp_path / "sections", SECTIONS.replace("{ampere}", ampere), SECTION_FILES,
                package="sections")


def test_a_section_a_kept_source_calls_is_built_for_its_own_capabilities(tmp_path: Path) -> None:
    sections_kernel(tmp_path)
    cell = plan_for(tmp_path, """
        kernels: [{path: sections, version: 1.0.0}]
        torch: ["2.11"]
        cuda: {"13.0": {sms: ["9.0"]}}
    """).cells[0]
    plans = {plan.name: plan for plan in cell.sections}
    # The binding calls ampere_attn; ampere_attn calls ada_quant in turn; blackwell_attn is
    # only declared, so its section stays out.
    assert [str(a) for a in plans["ampere"].archs] == ["8.0"] and plans["ampere"].widened
    assert [str(a) for a in plans["ada"].archs] == ["8.9"] and plans["ada"].widened
    assert plans["blackwell"].skipped and not plans["blackwell"].called
    assert not plans["hopper"].widened
    assert cell.widened["ampere"] == ("built for 8.0, outside the cell's SMs, because "
                                      "torch-ext/binding.h calls ampere_attn, which only it "
                                      "defines")
    assert cell.widened["ada"].endswith("because ampere.cu calls ada_quant, which only it "
                                        "defines")
    units = {unit.source: unit for unit in cell.units if unit.compiled}
    assert sorted(units) == ["ada.cu", "ampere.cu", "hopper.cu", "torch-ext/binding.cpp"]
    assert cell.gpu_code == {"sm_80", "sm_89", "sm_90a"}
    assert [str(sm) for sm in cell.sms] == ["9.0+PTX"]  # the cell's own SMs are unchanged


def test_a_called_section_the_toolkit_cannot_build_skips_the_cell_with_its_reason(
        tmp_path: Path) -> None:
    sections_kernel(tmp_path, ampere="7.0")  # CUDA 13 compiles no sm_70; CUDA 12.8 does
    plan = plan_for(tmp_path, """
        kernels: [{path: sections, version: 1.0.0}]
        torch: ["2.11"]
        cuda: {"12.8": {sms: ["9.0"], torch-index: "https://download.pytorch.org/whl/cu128"},
               "13.0": {sms: ["9.0"]}}
    """)
    (built,) = plan.cells
    assert present(built.cuda).version == Version("12.8")
    assert [str(a) for a in {p.name: p for p in built.sections}["ampere"].archs] == ["7.0"]
    (skipped,) = plan.skipped
    assert skipped.id == "sections/cu130torch211/x86_64"
    assert skipped.reason == (
        "[kernel.ampere] selects no SM of the cell and CUDA 13.0 cannot build its own "
        "capabilities (7.0), but torch-ext/binding.h calls ampere_attn, which only it "
        "defines: its wheel could not load")


def test_a_cell_that_keeps_no_section_on_its_own_sms_is_skipped_not_widened(tmp_path: Path) -> None:
    sections_kernel(tmp_path)
    plan = plan_for(tmp_path, """
        kernels: [{path: sections, version: 1.0.0}]
        torch: ["2.11"]
        cuda: {"12.8": {sms: ["7.5"], torch-index: "https://download.pytorch.org/whl/cu128"},
               "13.0": {sms: ["9.0"]}}
    """)
    assert [cell.id for cell in plan.cells] == ["sections/cu130torch211/x86_64"]
    (skipped,) = plan.skipped
    assert skipped.id == "sections/cu128torch211/x86_64"
    assert skipped.reason.endswith("[kernel.hopper] its cuda-capabilities (9.0a) select no "
                                   "SM of the cell (7.5)")
    every_sm = plan_for(tmp_path, """
        kernels: [{path: sections, version: 1.0.0}]
        torch: ["2.11"]
        cuda: {"13.0": {sms: ["8.0", "8.9", "9.0"]}}
    """).cells[0]
    assert not every_sm.widened
    assert [plan.name for plan in every_sm.sections if plan.skipped] == ["blackwell"]


def test_the_plan_says_which_sections_it_builds_outside_a_cells_sms(tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    sections_kernel(tmp_path)
    matrix = write(tmp_path / "matrix.yaml", """
        kernels: [{path: sections, version: 1.0.0}]
        torch: ["2.11"]
        cuda: {"13.0": {sms: ["9.0"]}}
    """)
    result = factory_main("plan", matrix, "--cache-dir", tmp_path / "cache", capsys=capsys)
    assert result.exit == 0
    widened = json.loads(result.stdout)["cells"]["sections/cu130torch211/x86_64"]["widened"]
    assert sorted(widened) == ["ada", "ampere"]
    assert widened["ampere"].startswith("built for 8.0, outside the cell's SMs, because")
    assert "note: sections [kernel.ampere] selects no SM of cu130torch211; it is built for " \
           "8.0, outside the cell's SMs, because torch-ext/binding.h calls ampere_attn, which " \
           "only it defines: leaving it out would give a wheel that fails to load" \
           in " ".join(result.stderr.split())


def test_a_kernel_s_chosen_tests_become_pytest_arguments(tmp_path: Path) -> None:
    kernel(tmp_path)
    kernel(tmp_path, name="other")
    matrix = load_matrix(write(tmp_path / "matrix.yaml", """
        kernels:
          - path: demo
            version: 1.0
            tests:
              paths: [test_ops.py::test_fwd, "test_flash.py::test_output[0.0-128]", slow/]
              keyword: not bwd and [0.0-128-
              timeout: 1h30m
              requires: [einops, numpy>=2]
          - {path: other, version: 2.0}
        torch: ["2.11"]
        cuda: {"13.0": {sms: ["9.0"]}}
    """))
    chosen, whole = (entry.tests for entry in matrix.kernels)
    assert chosen.pytest_args() == ["-k", "not bwd and [0.0-128-", "tests/test_ops.py::test_fwd",
                                    "tests/test_flash.py::test_output[0.0-128]", "tests/slow/"]
    assert (chosen.timeout, chosen.requires) == (5400.0, ("einops", "numpy>=2"))
    assert chosen.describe() == ("test_ops.py::test_fwd test_flash.py::test_output[0.0-128] "
                                 "slow/ -k 'not bwd and [0.0-128-'")
    assert type(chosen).from_json(json.loads(json.dumps(chosen.to_json()))) == chosen
    assert whole.pytest_args() == ["tests/"] and whole.describe() == ""
    plan = plan_for(tmp_path, (tmp_path / "matrix.yaml").read_text())
    assert [cell.tests for cell in plan.cells] == [chosen, whole]
