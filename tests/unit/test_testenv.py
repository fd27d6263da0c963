"""What a kernel's test environment holds and who asked for each part; the one line a
requirement that cannot be had gets; the wheelhouse's parts that need no network (pip freeze
read, the manylinux tags of a target, a folder of wheels checked); and the policy that decides
whether an untested wheel is published."""

from __future__ import annotations

import zipfile
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from factory.cells.run import requires_tests
from factory.config.model import ALL_TESTS, TestSelection
from factory.config.wheelhouse import wheelhouse_problem
from factory.errors import ConfigError
from factory.prove.testenv import Needed, requirement_sources, unavailable
from factory.prove.wheelhouse import installed_pins, manylinux_platforms

from ..support.checks import present

# What uv 0.13.9 printed, offline, for each case.
UV_NO_PYTEST = """\
error: No solution found when resolving dependencies
  cause: Because pytest was not found in the cache and you require pytest, we can conclude \
that your requirements are unsatisfiable.

hint: Packages were unavailable because the network was disabled. When the network is \
disabled, registry packages may only be read from the cache.
"""
UV_NO_NUMPY = """\
error: No solution found when resolving dependencies
  cause: Because numpy was not found in the cache and all versions of torchmetrics depend on \
numpy>1.20.0, we can conclude that all versions of torchmetrics cannot be used.
         And because you require torchmetrics, we can conclude that your requirements are \
unsatisfiable.
"""


def needed() -> list[Needed]:
    return requirement_sources("demo.whl (Requires-Dist)", ("einops>=0.8", "torch==2.11.*"),
                               ("torchmetrics", "kernels"),
                               TestSelection(requires=("kwf-helper<3", "transformers"),
                                             without=("Transformers",)))


def test_each_requirement_is_known_by_who_asked_for_it() -> None:
    assert [(n.requirement, n.source) for n in needed()] == [
        ("pytest", "the factory's test runner"),
        ("torchmetrics", "flake.nix (pythonCheckInputs)"),
        ("kwf-helper<3", "matrix.yaml (tests: requires)"),
        ("einops>=0.8", "demo.whl (Requires-Dist)"),
    ]  # torch is the cell's, kernels the stand-in's, transformers left out by the matrix


def test_a_requirement_that_cannot_be_had_is_one_line_with_who_asked_and_the_ways_out() -> None:
    line = unavailable(UV_NO_NUMPY, needed(), True, ())
    assert line == (
        "numpy cannot be had offline: uv's cache does not hold it (asked for by flake.nix "
        "(pythonCheckInputs): torchmetrics, which needs numpy): give it in a --wheelhouse "
        "folder (`factory wheelhouse MATRIX DIR` makes one where the network is), build with "
        "the network or leave it out with tests: {without: [numpy]} in matrix.yaml")
    line = unavailable(UV_NO_PYTEST, needed(), True, (Path("a"), Path("b")))
    assert line.startswith("pytest cannot be had offline: neither uv's cache nor the "
                           "wheelhouses holds it (asked for by the factory's test runner: "
                           "pytest): ")
    assert "without" not in line  # the test runner itself cannot be left out
    online = unavailable(UV_NO_PYTEST.replace("in the cache", "in the package registry"),
                         needed(), False, (Path("a"),))
    assert "neither the index nor the wheelhouse has it" in online
    assert "build with the network" not in online
    assert unavailable("error: Failed to download `x`\n  Caused by: disk full", needed(), False,
                       ()) == "its test environment could not be made: error: Failed to " \
                              "download `x`"


def test_the_import_gate_environment_offers_no_leaving_out() -> None:
    """A wheel's own requirement, missing for the import gate, cannot be left out of tests."""
    runtime = [Needed("torchmetrics", "build.toml (python-depends)")]
    line = unavailable(UV_NO_NUMPY, runtime, True, (), "import")
    assert line == (
        "numpy cannot be had offline: uv's cache does not hold it (asked for by build.toml "
        "(python-depends): torchmetrics, which needs numpy): give it in a --wheelhouse folder "
        "(`factory wheelhouse MATRIX DIR` makes one where the network is) or build with the "
        "network")
    assert unavailable("error: disk full", runtime, False, (), "import") == \
        "its import environment could not be made: error: disk full"


# What uv 0.13.9 printed with --no-build for a requirement that is only a source distribution.
UV_SOURCE_ONLY = """\
error: No solution found when resolving dependencies
  cause: Because pycparser==2.14 has no usable wheels and you require pycparser==2.14, we can \
conclude that your requirements are unsatisfiable.

hint: Wheels are required for `pycparser` because building from source is disabled for all \
packages (i.e., with `--no-build`)
"""


def test_a_requirement_only_there_as_source_is_never_built_and_the_line_says_why() -> None:
    """Building a source distribution runs its code with the factory's rights: the kernel
    names what is installed, so a requirement is taken as a wheel or not at all."""
    asked = [Needed("pycparser==2.14", "demo.whl (Requires-Dist)")]
    for offline in (True, False):
        line = unavailable(UV_SOURCE_ONLY, asked, offline, (Path("a"),))
        assert line == (
            "pycparser cannot be had as a wheel: only its source is there, and a requirement "
            "is never built from source (its build would run its code with the factory's "
            "rights) (asked for by demo.whl (Requires-Dist): pycparser==2.14): give a wheel of "
            "it, built where its code is trusted, in a --wheelhouse folder or leave it out "
            "with tests: {without: [pycparser]} in matrix.yaml")


def write_wheel(folder: Path, name: str, version: str, metadata_name: str | None = None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as archive:
        archive.writestr(f"{name}-{version}.dist-info/METADATA",
                         f"Metadata-Version: 2.1\nName: {metadata_name or name}\n"
                         f"Version: {version}\n")


def test_a_wheelhouse_is_a_folder_of_whole_wheels(tmp_path: Path) -> None:
    assert wheelhouse_problem(tmp_path / "none") == "does not exist"
    (tmp_path / "file").write_text("x")
    assert present(wheelhouse_problem(tmp_path / "file")).startswith("is not a folder")
    (tmp_path / "empty").mkdir()
    assert present(wheelhouse_problem(tmp_path / "empty")).startswith("holds no wheel")
    write_wheel(tmp_path / "good", "einops", "0.8.2")
    write_wheel(tmp_path / "good", "Py_CPUInfo", "9.0.0", "py-cpuinfo")
    assert wheelhouse_problem(tmp_path / "good") is None
    (tmp_path / "good" / "zz-1.0-py3-none-any.whl").write_bytes(b"PK\x03\x04")
    assert wheelhouse_problem(tmp_path / "good") == \
        "holds a damaged wheel, zz-1.0-py3-none-any.whl: not a readable zip file (File is not " \
        "a zip file)"
    write_wheel(tmp_path / "odd", "einops", "0.8.2", "other")
    assert "its METADATA names other 0.8.2, its file name einops 0.8.2" in \
        str(wheelhouse_problem(tmp_path / "odd"))
    (tmp_path / "named").mkdir()
    (tmp_path / "named" / "not-a-wheel.whl").write_bytes(b"")
    assert "not a wheel's file name" in str(wheelhouse_problem(tmp_path / "named"))


def test_pip_freeze_becomes_the_versions_a_target_has(tmp_path: Path) -> None:
    text = ("# a comment\nnumpy==2.5.2\nPyYAML==6.0.3\ntorch==2.11.0+cu130\n"
            "-e git+https://example.invalid/x.git#egg=x\nlocal @ file:///tmp/local\n\n")
    assert installed_pins(text, tmp_path / "freeze.txt") == {"numpy": "2.5.2",
                                                            "pyyaml": "6.0.3"}
    with pytest.raises(ConfigError) as refused:
        installed_pins("numpy==2\n???\n", tmp_path / "freeze.txt")
    assert refused.value.line == 2 and refused.value.key == "--installed"


def test_a_target_of_a_glibc_takes_every_older_manylinux_tag() -> None:
    tags = manylinux_platforms("2.28", "x86_64")
    assert tags[:2] == ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64"]
    assert {"manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64",
            "manylinux_2_5_x86_64"} <= set(tags)
    arm = manylinux_platforms("2.35", "aarch64")
    assert arm[0] == "manylinux_2_35_aarch64" and arm[-1] == "manylinux2014_aarch64"
    assert not any("2_16" in tag or "2010" in tag for tag in arm)


@pytest.mark.parametrize(("kernel", "command_line", "required"), [
    (None, False, False), (None, True, True), (True, False, True), (False, False, False),
    (False, True, True),  # --require-tests holds for every cell
])
def test_whether_an_untested_wheel_is_published(kernel: bool | None, command_line: bool,
                                                required: bool) -> None:
    cell = SimpleNamespace(tests=replace(ALL_TESTS, required=kernel))  # all the policy reads
    assert requires_tests(cell, command_line) is required  # type: ignore[arg-type]
