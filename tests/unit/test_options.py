"""The settings a run takes from several places are settled once, by pipeline/options.py: the
command line over matrix.yaml over the environment over the defaults; the option reference of
the documentation is written from the same table."""

from __future__ import annotations

from pathlib import Path

import pytest

from factory import defaults
from factory.cli import make_parser
from factory.config.matrix import load_matrix
from factory.config.model import Matrix, NameCheck, SizeLimit
from factory.errors import ConfigError
from factory.pipeline.options import (
    SETTINGS,
    Given,
    build_root,
    cache_folder,
    name_index,
    object_folder,
    option_reference,
    settle,
)

from ..support.cli import GOOD_KERNEL, GOOD_MATRIX, SOURCES, option_strings
from ..support.factory import REPO, make_kernel, write
from ..support.wheels import make_wheel


def matrix_of(tmp_path: Path, extra: str = "") -> Matrix:
    make_kernel(tmp_path / "demo", GOOD_KERNEL, SOURCES, package="demo")
    (tmp_path / "wh-matrix").mkdir(exist_ok=True)
    make_wheel(tmp_path / "wh-matrix", "einops", "0.8.1", tag="py3-none-any")
    return load_matrix(write(tmp_path / "matrix.yaml", GOOD_MATRIX + extra))


def test_the_command_line_wins_then_the_matrix_then_the_default(tmp_path: Path) -> None:
    bare = matrix_of(tmp_path)
    settled = settle(Given(build_root=tmp_path / "build"), tmp_path / "cache", bare, {})
    assert (settled.runner, settled.runner_from) == (defaults.RUNNER, "the default")
    assert settled.max_wheel_size is None
    assert settled.builder_base == defaults.BUILDER_BASE
    assert settled.objects == tmp_path / "cache" / defaults.OBJECT_CACHE_FOLDER
    assert settled.build.source_date_epoch is None

    written = matrix_of(tmp_path, "runner: docker\nmax-wheel-size: pypi\nwheelhouse: wh-matrix\n"
                                  "docker: {base: \"example.org/base:{arch}\"}\n")
    settled = settle(Given(build_root=tmp_path / "build", wheelhouses=(tmp_path / "wh-cli",)),
                     tmp_path / "cache", written, {"SOURCE_DATE_EPOCH": "1700000000"})
    assert (settled.runner, settled.runner_from) == ("docker", "runner: in matrix.yaml")
    assert settled.max_wheel_size == SizeLimit(100 * 2**20, "pypi")
    assert settled.builder_base == "example.org/base:{arch}"
    assert settled.build.wheelhouses == (tmp_path / "wh-cli", (tmp_path / "wh-matrix").resolve())
    assert settled.build.source_date_epoch == 1700000000

    given = Given(runner="local", max_wheel_size=SizeLimit(5, "5"), objects=tmp_path / "objs",
                  build_root=tmp_path / "build", base_url="https://example.org/w")
    settled = settle(given, tmp_path / "cache", written, {})
    assert (settled.runner, settled.runner_from) == ("local", "--runner")
    assert settled.max_wheel_size == SizeLimit(5, "5")
    assert settled.objects == tmp_path / "objs"
    assert settled.build.index_url == "https://example.org/w"
    assert settled.build.build_root == tmp_path / "build"


def test_the_build_root_comes_from_the_command_line_then_the_environment(tmp_path: Path) -> None:
    variable = defaults.BUILD_ROOT_VARIABLE
    environ = {variable: str(tmp_path / "from-env")}
    assert build_root(tmp_path / "given", environ) == tmp_path / "given"
    assert build_root(None, environ) == tmp_path / "from-env"
    assert (tmp_path / "from-env").is_dir()
    with pytest.raises(ConfigError, match="must be an absolute path") as raised:
        build_root(None, {variable: "relative/build"})
    assert raised.value.key == variable


def test_what_the_environment_gives_is_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is after 2107-12-31"):
        settle(Given(build_root=tmp_path / "build"), tmp_path / "cache", matrix_of(tmp_path),
               {"SOURCE_DATE_EPOCH": "7258118400"})


def test_the_name_index_comes_from_the_matrix_then_the_environment(tmp_path: Path) -> None:
    variable = defaults.NAME_INDEX_VARIABLE
    assert name_index(NameCheck(), {}) == defaults.NAME_INDEX
    assert name_index(NameCheck(), {variable: "https://mirror.example/simple/"}) == \
        "https://mirror.example/simple/"
    assert name_index(NameCheck(), {variable: "off"}) is None
    assert name_index(NameCheck(index="https://own.example/simple/"),
                      {variable: "off"}) == "https://own.example/simple/"


def test_the_cache_comes_from_the_flag_then_the_environment(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    monkeypatch.setenv(defaults.CACHE_VARIABLE, str(tmp_path / "from-env"))
    assert cache_folder(tmp_path / "given") == (tmp_path / "given").resolve()
    assert cache_folder(None) == (tmp_path / "from-env").resolve()
    assert object_folder(None, tmp_path) == tmp_path / defaults.OBJECT_CACHE_FOLDER


def test_the_option_reference_lists_every_setting_where_it_can_be_given() -> None:
    text = option_reference()
    flags = {flag for options in option_strings(make_parser()).values() for flag in options}
    for setting in SETTINGS:
        assert f"| {setting.name} |" in text
        assert setting.flag is None or set(setting.flag.split(", ")) <= flags, setting.flag
    page = (REPO / "docs" / "reference" / "options.md").read_text()
    assert "<!-- factory-options -->" in page


def test_a_command_reads_its_matrix_once() -> None:
    """matrix.yaml is read by the command's entry function in pipeline/, once, and the Matrix
    it gives is handed on (to settle, to the planner): no step below reads it again."""
    import ast

    readers: dict[str, int] = {}
    for path in sorted((REPO / "factory").rglob("*.py")):
        for function in ast.walk(ast.parse(path.read_text())):
            if not isinstance(function, ast.FunctionDef):
                continue
            calls = sum(1 for node in ast.walk(function) if isinstance(node, ast.Call)
                        and getattr(node.func, "id", getattr(node.func, "attr", "")) ==
                        "load_matrix")
            if calls:
                readers[f"{path.relative_to(REPO / 'factory')}:{function.name}"] = calls
    assert all(name.startswith("pipeline/") and not name.startswith("pipeline/load.py")
               for name in readers), readers
    assert set(readers.values()) == {1}, readers


def test_the_machine_is_read_from_the_environment_in_one_place(tmp_path: Path) -> None:
    """The compilers, toolkits and Debian archive the machine names are settled with the rest
    (and listed in the option reference); no module but system/machine.py reads them from
    the environment."""
    import re

    from factory.system.machine import (
        DEBIAN_KEYRING_VARIABLE,
        DEBIAN_MIRROR_VARIABLE,
        Machine,
    )

    environ = {"CXX": "clang++-17", "CXX_aarch64": "/opt/cross/bin/g++", "CUDA_HOME": "",
               "CUDA_PATH": "/opt/cuda-13.0", DEBIAN_MIRROR_VARIABLE: " http://mirror.test/d ",
               DEBIAN_KEYRING_VARIABLE: str(tmp_path / "keys.gpg")}
    settled = settle(Given(build_root=tmp_path / "build"), tmp_path / "cache",
                     matrix_of(tmp_path), environ)
    assert settled.build.machine == Machine(
        "clang++-17", (("aarch64", "/opt/cross/bin/g++"),), (Path("/opt/cuda-13.0"),),
        "http://mirror.test/d", tmp_path / "keys.gpg")
    assert settle(Given(build_root=tmp_path / "build"), tmp_path / "cache",
                  matrix_of(tmp_path), {}).build.machine == Machine()
    text = option_reference()
    assert all(f"`{name}`" in text for name in ("CXX", "CXX_<platform>", DEBIAN_MIRROR_VARIABLE,
                                                DEBIAN_KEYRING_VARIABLE))
    reads = re.compile(r"environ(?:\.get\(|\[)\s*[\"'](?:CXX|CUDA_HOME|CUDA_PATH|"
                       r"KERNEL_WHEEL_FACTORY_DEBIAN)")
    readers = [str(path.relative_to(REPO / "factory"))
               for path in sorted((REPO / "factory").rglob("*.py"))
               if reads.search(path.read_text())]
    # sources/installed.py holds the probe another interpreter runs: it reads that machine's
    assert readers == ["sources/installed.py", "system/machine.py"], readers
