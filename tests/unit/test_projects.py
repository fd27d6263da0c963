"""PEP 517 projects (setup.py / pyproject.toml CUDA extensions): how they are recognised, named
and planned (one cell per CPython, or one abi3 cell), and how their metadata is re-issued."""

from __future__ import annotations

from pathlib import Path

import pytest

from factory.cells.kinds.pep517 import PEP517
from factory.cells.kinds.pep517.build import c_compiler
from factory.config.project import project_kind, read_project, static_version
from factory.errors import ConfigError
from factory.wheel.assemble import relabelled

from ..support.factory import factory_main, snapshot, write
from ..support.plans import setup_py_project as project


def test_a_setup_py_project_is_named_from_its_setup_call(tmp_path: Path) -> None:
    root = project(tmp_path)
    assert project_kind(root) == "pep517"
    spec = read_project(root, "pep517")
    assert (spec.name, spec.kind, spec.limited_api, spec.static_version) == \
        ("fused_op", "pep517", False, None)
    assert spec.build_toml == root / "setup.py"
    assert project_kind(root, "kernel-builder") is None  # stated, but there is no build.toml


def test_pyproject_metadata_wins_and_a_literal_version_is_read(tmp_path: Path) -> None:
    root = project(tmp_path, ", py_limited_api=True", """
        [build-system]
        requires = ["setuptools", "torch"]
        [project]
        name = "fused-op-cuda"
        version = "2.1"
        license = {text = "MIT"}
    """)
    spec = read_project(root, "pep517")
    assert (spec.name, spec.static_version, spec.license, spec.limited_api) == \
        ("fused-op-cuda", "2.1", "MIT", True)
    assert static_version(root) == "2.1"


@pytest.mark.parametrize("dynamic, expected", [
    ("", ("einops>=0.8", "numpy")),  # what a wheelhouse fetches for its test environment
    ('dynamic = ["dependencies"]', ()),  # only the built wheel will say
])
def test_the_requirements_pyproject_states_are_the_wheels_before_it_is_built(
        tmp_path: Path, dynamic: str, expected: tuple[str, ...]) -> None:
    root = project(tmp_path, "", f"""
        [project]
        name = "fused-op"
        version = "1.0"
        dependencies = ["torch>=2.6", "einops >= 0.8", "numpy"]
        {dynamic}
    """)
    spec = read_project(root, "pep517")
    assert PEP517.wheel_requirements(spec) == expected
    assert read_project(project(tmp_path / "setup-py-only"), "pep517").project_dependencies == ()


def test_a_build_toml_makes_a_kernel_builder_repo_even_beside_a_setup_py(tmp_path: Path) -> None:
    root = project(tmp_path)
    write(root / "build.toml", "[general]\nname = \"x\"\n")
    assert project_kind(root) == "kernel-builder"
    assert project_kind(root, "pep517") == "pep517"


def test_a_name_only_running_setup_py_would_tell_is_refused(tmp_path: Path) -> None:
    write(tmp_path / "setup.py", "from setuptools import setup\nsetup(name=compute_name())\n")
    with pytest.raises(ConfigError) as caught:
        read_project(tmp_path, "pep517")
    assert caught.value.file == tmp_path / "setup.py" and caught.value.key == "name"
    assert "without running its build" in str(caught.value)


@pytest.mark.parametrize(("entry", "top", "expected"), [
    ("kind: cmake", "", "kernels[0].kind: unknown project kind 'cmake'"),
    ("kind: kernel-builder", "", "kernels[0].path: 'fused' has no build.toml"),
    ("env: [A]", "", "kernels[0].env: expected a table of variables"),
    ("env: {TORCH_CUDA_ARCH_LIST: '8.0'}", "",
     "kernels[0].env.TORCH_CUDA_ARCH_LIST: TORCH_CUDA_ARCH_LIST is set by the factory"),
    ("env: {1BAD: x}", "", "'1BAD' is not an environment variable name"),
    ("", 'python: ["3.8"]', "Python 3.8 is older than any torch"),
    ("", 'python: ["3.11", "3.11"]', "Python 3.11 is listed twice"),
    ("", 'python: ["311"]', "give a CPython as 3.N or, free-threaded, 3.Nt (e.g. 3.12, 3.14t), "
     "got '311'"),
    ("", 'python: ["3.14x"]', "python[0]: give a CPython as 3.N or, free-threaded, 3.Nt (e.g. "
     "3.12, 3.14t), got '3.14x'"),
    ("", 'python: ["3.12", "3.12t"]', "python[1]: CPython 3.12 has no free-threaded build (it "
     "starts with 3.13t)"),
    ("", 'python: ["3.14t", "3.14t"]', "python[1]: Python 3.14t is listed twice"),
    ("needs-gil: sometimes", "", "kernels[0].needs-gil:"),
])
def test_bad_project_settings_are_refused_where_they_are(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str],
                                                         entry: str, top: str,
                                                         expected: str) -> None:
    project(tmp_path / "fused")
    write(tmp_path / "matrix.yaml", f"""
        kernels:
          - path: fused
            version: 1.0.0
            {entry}
        torch: ["2.11"]
        cuda: {{"13.0": {{sms: ["9.0"]}}}}
        {top}
    """)
    before = snapshot(tmp_path)
    result = factory_main("build", str(tmp_path / "matrix.yaml"), "--out",
                          str(tmp_path / "out"), capsys=capsys)
    assert result.exit == 2
    assert result.stderr.count("\n") == 1 and "matrix.yaml:" in result.stderr
    assert expected in result.stderr, result.stderr
    assert snapshot(tmp_path) == before


METADATA = b"""Metadata-Version: 2.1
Name: causal_conv1d
Version: 1.6.1
Summary: Causal depthwise conv1d in CUDA, with a PyTorch interface
Classifier: Programming Language :: Python :: 3
Requires-Python: >=3.9
Description-Content-Type: text/markdown
Requires-Dist: torch
Requires-Dist: packaging
Requires-Dist: torch>=2.0; extra == "dev"

# Causal depthwise conv1d

Requires-Dist: torch (in the description, left alone)
"""


def test_metadata_is_reissued_with_the_label_and_the_pin_and_nothing_else_changes() -> None:
    issued = relabelled(METADATA, "1.6.1+cu130torch211", "torch==2.11.*")
    assert (issued.name, issued.version) == ("causal_conv1d", "1.6.1+cu130torch211")
    head, _, body = issued.render().decode().partition("\n\n")
    assert head.splitlines() == [
        "Metadata-Version: 2.1", "Name: causal_conv1d", "Version: 1.6.1+cu130torch211",
        "Summary: Causal depthwise conv1d in CUDA, with a PyTorch interface",
        "Classifier: Programming Language :: Python :: 3", "Requires-Python: >=3.9",
        "Description-Content-Type: text/markdown", "Requires-Dist: packaging",
        'Requires-Dist: torch>=2.0; extra == "dev"', "Requires-Dist: torch==2.11.*"]
    assert body == METADATA.decode().partition("\n\n")[2]


@pytest.mark.parametrize(("cxx", "cc"), [
    ("g++", "gcc"), ("g++-12", "gcc-12"), ("/opt/gcc/bin/g++", "/opt/gcc/bin/gcc"),
    ("clang++", "clang"), ("/usr/bin/clang++-18", "/usr/bin/clang-18"), ("c++", "cc"),
    ("/usr/local/bin/my-wrapper", "/usr/local/bin/my-wrapper"),
])
def test_the_c_compiler_of_a_projects_build_matches_its_cxx(cxx: str, cc: str) -> None:
    assert c_compiler(cxx) == cc
