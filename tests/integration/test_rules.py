"""Toolchain rules where a plan is made (planning starts git) or a program runs: the rules each
cell is planned with, matrix.yaml's changes to the shipped table and its bad entries,
kernel-builder flags, and the compiler wrappers of a PEP 517 build run as the build runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from factory.cells.compilers import wrap_compilers
from factory.compile.commands import compile_jobs
from factory.errors import ConfigError
from factory.plan.model import Plan

from ..support.checks import present
from ..support.plans import TOOLCHAIN, kernel, plan_for

MATRIX = """
kernels:
  - path: demo
    version: 1.0.0
  - path: other
    version: 1.0.0
    toolchain-rules:
      - {name: gencode-to-cell, off: true}
torch: ["2.13", "2.14"]
cuda:
  "13.0": {sms: ["9.0"]}
"""


def rules_of(plan: Plan) -> dict[str, list[str]]:
    return {cell.id: [rule.name for rule in cell.rules] for cell in plan.cells}


def test_each_cell_is_planned_with_the_rules_of_its_torch(tmp_path: Path) -> None:
    kernel(tmp_path, "demo")
    kernel(tmp_path, "other")
    plan = plan_for(tmp_path, MATRIX)
    assert rules_of(plan) == {
        "demo/cu130torch213/x86_64": ["gencode-to-cell"],
        "demo/cu130torch214/x86_64": ["cxx20-for-torch-2.14", "gencode-to-cell"],
        "other/cu130torch213/x86_64": [],
        "other/cu130torch214/x86_64": ["cxx20-for-torch-2.14"],
    }


def test_a_matrix_adds_replaces_and_turns_off_rules(tmp_path: Path) -> None:
    kernel(tmp_path, "demo")
    kernel(tmp_path, "other")
    text = MATRIX.replace("torch: [", """toolchain-rules:
  - name: cxx20-for-torch-2.14
    flag: -std
    value: c++20
    torch: ">=2.13"
    reason: this kernel's own headers need C++20
  - {name: cxx17-floor, flag: -std, value: c++17, reason: no project may ask for less}
torch: [""")
    plan = plan_for(tmp_path, text)
    assert rules_of(plan)["demo/cu130torch213/x86_64"] == [
        "cxx20-for-torch-2.14", "gencode-to-cell", "cxx17-floor"]
    assert rules_of(plan)["other/cu130torch213/x86_64"] == ["cxx20-for-torch-2.14",
                                                            "cxx17-floor"]
    (cell,) = [c for c in plan.cells if c.id == "demo/cu130torch213/x86_64"]
    assert cell.rules[0].reason == "this kernel's own headers need C++20"


@pytest.mark.parametrize(("entry", "key", "message"), [
    ("{name: x, flag: -O3, reason: r}", "toolchain-rules[0].flag",
     "unknown flag '-O3': a toolchain rule rewrites -std or -gencode"),
    ("{name: x, flag: -std, reason: r}", "toolchain-rules[0]", "a -std rule needs value"),
    ("{name: x, flag: -std, value: c11, reason: r}", "toolchain-rules[0].value",
     "'c11' is not a C++ standard"),
    ("{name: x, flag: -gencode, value: sm_90, reason: r}", "toolchain-rules[0].value",
     "a -gencode rule takes no value"),
    ("{name: x, flag: -std, value: c++20, torch: '>>2', reason: r}",
     "toolchain-rules[0].torch", "'>>2' is not a version specifier"),
    ("{name: nope, off: true}", "toolchain-rules[0].name",
     "no toolchain rule is named 'nope'"),
    ("{name: \"a\\x1b[31m\", flag: -gencode, reason: r}", "toolchain-rules[0].name",
     "is not a rule name"),
    ("{name: x, flag: -gencode, reason: r, when: always}", "toolchain-rules[0].when", "when"),
])
def test_a_bad_rule_entry_names_its_file_line_and_key(tmp_path: Path, entry: str, key: str,
                                                      message: str) -> None:
    kernel(tmp_path, "demo")
    text = f"""kernels:
  - path: demo
    version: 1.0.0
toolchain-rules:
  - {entry}
torch: ["2.14"]
cuda: {{"13.0": {{sms: ["9.0"]}}}}
"""
    with pytest.raises(ConfigError) as raised:
        plan_for(tmp_path, text)
    error = raised.value
    assert (present(error.file).name, error.line, error.key) == ("matrix.yaml", 5, key), \
        str(error)
    assert message in str(error)


def test_kernel_builder_flags_get_the_rules_of_the_cell(tmp_path: Path) -> None:
    kernel(tmp_path, "demo", caps='cuda-flags = ["-std=c++17", "-gencode", '
                                  '"arch=compute_80,code=sm_80", "-lineinfo"]\n'
                                  'cxx-flags = ["-std=gnu++17"]')
    plan = plan_for(tmp_path, MATRIX.replace("  - path: other\n    version: 1.0.0\n    "
                                             "toolchain-rules:\n      - {name: gencode-to-cell, "
                                             "off: true}\n", ""))
    by_torch = {str(cell.torch): cell for cell in plan.cells}
    old = {job.source: job for job in compile_jobs(by_torch["2.13"], TOOLCHAIN, Path("/b"))}
    new = {job.source: job for job in compile_jobs(by_torch["2.14"],
                                                   replace(TOOLCHAIN, cxx_std="20"), Path("/b"))}
    assert old["k.cu"].argv[-6:-3] == ("-gencode", "arch=compute_80,code=sm_80", "-lineinfo")
    assert "-std=c++17" in old["k.cu"].argv and old["k.cu"].changes == ()
    # the project's own -std comes after the factory's: raised, it is the one nvcc keeps
    assert new["k.cu"].argv.count("-std=c++17") == 0
    assert new["k.cu"].argv.count("-std=c++20") == 2
    # the unit's own -gencode names none of the cell's SMs: narrowing leaves it as it is
    assert new["k.cu"].argv[-7:-3] == ("-std=c++20", "-gencode", "arch=compute_80,code=sm_80",
                                       "-lineinfo")
    assert [(c.rule, c.before) for c in new["k.cu"].changes] == [
        ("cxx20-for-torch-2.14", "-std=c++17")]


def test_the_wrappers_rewrite_what_the_build_runs_and_note_it(tmp_path: Path) -> None:
    """A build's CXX and nvcc, run as its build system runs them: the real compiler (here a
    script printing its arguments) gets the rewritten command, the note file the changes."""
    real = tmp_path / "real-g++"
    real.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    real.chmod(0o755)
    home = tmp_path / "cuda"
    (home / "bin").mkdir(parents=True)
    (home / "include").mkdir()
    (home / "bin" / "ptxas").write_text("")
    (home / "bin" / "nvcc").symlink_to(real)
    kernel(tmp_path, "demo")
    kernel(tmp_path, "other")
    (cell,) = [c for c in plan_for(tmp_path, MATRIX).cells
               if c.id == "demo/cu130torch214/x86_64"]
    toolchain = replace(TOOLCHAIN, cxx=str(real),
                        cuda=replace(present(TOOLCHAIN.cuda), home=home))
    wrapped = wrap_compilers(cell, toolchain, tmp_path / "work", Path(sys.executable),
                             str(real))
    wrapped = present(wrapped)
    variables = wrapped.variables
    assert variables["CC"] == variables["CXX"]
    assert Path(variables["CUDA_HOME"], "include").resolve() == home / "include"
    assert Path(variables["CUDA_HOME"], "bin", "ptxas").resolve() == home / "bin" / "ptxas"
    assert variables["PYTORCH_NVCC"] == str(Path(variables["CUDA_HOME"], "bin", "nvcc"))

    def run(command: str, *args: str) -> list[str]:
        done = subprocess.run([command, *args], capture_output=True, text=True, check=True)
        return done.stdout.splitlines()

    assert run(variables["CXX"], "-std=c++17", "-c", "a b.cpp") == ["-std=c++20", "-c",
                                                                   "a b.cpp"]
    assert run(variables["PYTORCH_NVCC"], "-std=c++17", "-gencode",
               "arch=compute_75,code=sm_75", "-gencode=arch=compute_90,code=sm_90") == [
        "-std=c++20", "-gencode=arch=compute_90,code=sm_90"]
    assert run(variables["CXX"], "--version") == ["--version"]
    notes = [json.loads(line) for line in wrapped.record.read_text().splitlines()]
    assert [note["compiler"] for note in notes] == ["real-g++", "nvcc"]
    assert [(c.rule, c.before, c.after) for c in wrapped.changes()] == [
        ("cxx20-for-torch-2.14", "-std=c++17", "-std=c++20"),
        ("cxx20-for-torch-2.14", "-std=c++17", "-std=c++20"),
        ("gencode-to-cell", "-gencode arch=compute_75,code=sm_75", "(dropped)")]


def test_no_rule_in_force_means_no_wrappers(tmp_path: Path) -> None:
    kernel(tmp_path, "other")
    (cell,) = [c for c in plan_for(tmp_path, MATRIX.replace("  - path: demo\n    version: "
                                                            "1.0.0\n", "")).cells
               if str(c.torch) == "2.13"]
    assert cell.rules == ()
    assert wrap_compilers(cell, TOOLCHAIN, tmp_path / "work", Path(sys.executable), "gcc") \
        is None

