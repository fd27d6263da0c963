"""Toolchain rules in real builds of setup.py projects (the example relu-scale, as projects
written for older torch releases have it), on this machine: one that pins C++17 compiled as
C++20, one whose own -gencode list is kept, one that cannot build under the rule; the rules a
wheel records rebuild it byte for byte."""

from __future__ import annotations

import functools
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from ..support.factory import REPO, Result, cache_env, kept_project, run_factory, write
from ..support.installs import read_dist_info

pytestmark = [pytest.mark.slow, pytest.mark.network]

ASSERT_CXX20 = 'static_assert(__cplusplus >= 202002L, "compiled as C++20");\n'
NEEDS_CXX17 = "#if __cplusplus > 201703L\n#error this project builds as C++17 only\n#endif\n"


def pinned_project(folder: Path, name: str, prologue: str) -> Path:
    """The example with its own name, `-std=c++17` for both compilers and a -gencode list of
    sm_80 and sm_90, and `prologue` at the top of each source; its package imports `six`,
    which it requires (the import gate must install it)."""
    shutil.copytree(REPO / "examples" / "relu-scale", folder)
    package = folder / "relu_scale" / "__init__.py"
    package.write_text(package.read_text().replace("import torch\n", "import six\n"
                                                                     "import torch\n", 1))
    setup = folder / "setup.py"
    setup.write_text(setup.read_text()
                     .replace('install_requires=["torch"]', 'install_requires=["torch", "six"]')
                     .replace('name="relu-scale"', f'name="{name}"')
                     .replace('"cxx": ["-O3"], "nvcc": ["-O3"]',
                              '"cxx": ["-O3", "-std=c++17"], "nvcc": ["-O3", "-std=c++17", '
                              '"-gencode", "arch=compute_80,code=sm_80", "-gencode", '
                              '"arch=compute_90,code=sm_90"]'))
    for source in ("relu_scale.cpp", "relu_scale_cuda.cu"):
        path = folder / "csrc" / source
        path.write_text(prologue + path.read_text())
    return folder


@pytest.fixture(scope="module")
def ruled_build(tmp_path_factory: pytest.TempPathFactory,
                factory_cache: Path) -> tuple[Path, Any, Result]:
    folder = tmp_path_factory.mktemp("rules")
    # kept where the next run finds them, so that it is served the objects this one compiles
    raised, wide, stuck = (kept_project(name, functools.partial(pinned_project, name=name,
                                                                 prologue=prologue))
                           for name, prologue in (("raised", ASSERT_CXX20),
                                                  ("wide", ASSERT_CXX20),
                                                  ("stuck", NEEDS_CXX17)))
    write(folder / "matrix.yaml", f"""
        kernels:
          - {{path: {raised}, version: 1.0.0}}
          - path: {wide}
            version: 1.0.0
            toolchain-rules: [{{name: gencode-to-cell, off: true}}]
          - {{path: {stuck}, version: 1.0.0}}
        torch: ["2.11"]
        cuda: {{"13.0": {{sms: ["9.0"]}}}}
        python: ["{sys.version_info.major}.{sys.version_info.minor}"]
        runner: local
        toolchain-rules:  # the cells' torch: the shipped rule starts at 2.14
          - name: cxx20-for-torch-2.14
            flag: -std
            value: c++20
            torch: ">=2.11"
            reason: the project's headers need C++20
    """)
    result = run_factory("build", "matrix.yaml", "--out", folder / "index", cwd=folder,
                         env=cache_env(factory_cache))
    assert result.exit == 1, result.stdout + result.stderr  # stuck fails, the others do not
    return folder, raised, result


def built(index: Path, name: str) -> tuple[Path, dict[str, Any], str]:
    (wheel,) = (index / "files").glob(f"{name}-1.0.0+cu130torch211-*.whl")
    (log,) = (index / "logs").glob(f"{name}-*.log")
    return wheel, json.loads(read_dist_info(wheel, "provenance.json")), log.read_text()


def test_a_project_pinning_cxx17_is_compiled_as_cxx20_and_says_so(
        ruled_build: tuple[Path, Any, Result]) -> None:
    folder, _, _ = ruled_build
    _, provenance, log = built(folder / "index", "raised")
    assert "toolchain rule cxx20-for-torch-2.14: -std=c++17 -> -std=c++20 (2x), in the " \
        "project's compiler commands" in log
    assert [rule["name"] for rule in provenance["cell"]["rules"]] == [
        "cxx20-for-torch-2.14", "gencode-to-cell"]
    assert provenance["cell"]["rules"][0]["torch"] == ">=2.11"
    assert provenance["toolchain"]["toolchain_rules"].startswith(
        "cxx20-for-torch-2.14: -std=c++17 -> -std=c++20 (2x); gencode-to-cell: dropped the "
        "-gencode entries of sm_80 (1x)")
    # its own sm_80 entry dropped; a project's own list stands for TORCH_CUDA_ARCH_LIST's
    # (cpp_extension adds none), so no PTX
    assert list(provenance["gpu_code_found"].values()) == [["sm_90"]]
    assert "carries GPU code the cell did not ask for" not in log
    # the wheel's own requirement, installed beside torch for the import gate
    assert "installing the wheel's requirements beside torch 2.11" in log
    assert re.search(r"resolved for torch 2\.11\S* \(CUDA 13\.0\): .*six==", log), log


def test_a_project_whose_gencode_rule_is_off_carries_more_and_the_page_says_what(
        ruled_build: tuple[Path, Any, Result]) -> None:
    folder, _, _ = ruled_build
    _, provenance, log = built(folder / "index", "wide")
    assert list(provenance["gpu_code_found"].values()) == [["sm_80", "sm_90"]]
    assert re.search(r"note: the wheel carries GPU code the cell did not ask for: sm_80 \([\d.]+ "
                     r"\w+ of its [\d.]+ \w+ of GPU code, and the compile time it took\): the "
                     r"project names these architectures itself, and no -gencode toolchain rule "
                     r"is in force", log), log
    page = json.loads((folder / "index" / "browse" / "wide.json").read_text())
    (wheel,) = page["versions"][0]["cells"][0]["wheels"]
    assert wheel["gpu_code_beyond"] == ["sm_80"]
    assert wheel["gpu_code_sizes"]["sm_80"][0] > 0


def test_a_project_that_cannot_build_under_the_rule_gets_the_compilers_message_and_its_name(
        ruled_build: tuple[Path, Any, Result]) -> None:
    folder, _, result = ruled_build
    line = next(line for line in result.stdout.splitlines() if "stuck/cu130torch211" in line
                and "failed (" in line)
    assert "#error this project builds as C++17 only" in line
    assert "(built under toolchain rule cxx20-for-torch-2.14 (-std c++20, torch >=2.11)" in line
    assert not list((folder / "index" / "files").glob("stuck-*"))


def test_verify_rebuilds_with_the_recorded_rules(ruled_build: tuple[Path, Any, Result],
                                                 factory_cache: Path, tmp_path: Path) -> None:
    """No matrix is at hand: only the rules recorded in the wheel (the cxx20 rule for 2.11)
    make the project compile, and the same bytes come out."""
    folder, raised, _ = ruled_build
    wheel, _, _ = built(folder / "index", "raised")
    verified = run_factory("verify", wheel, "--source", raised, cwd=tmp_path,
                           env=cache_env(factory_cache))
    assert verified.exit == 0, verified.stdout + verified.stderr
    assert "verified: the rebuilt wheel is byte-identical" in verified.stdout
