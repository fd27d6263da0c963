"""The suite's fixtures and hooks: the tests' own persistent cache of toolkits and torch
environments (never the user's: every factory the tests start is pointed at it), the example
built once per session, and where the suite's time goes. The helpers tests share are in
tests/support/."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from .support.factory import (
    EXAMPLE,
    REPO,
    TEST_CACHE,
    Result,
    cache_env,
    make_kernel,
    one_cell_matrix,
    run_factory,
    stable_matrix,
    write,
)
from .support.installs import new_torch_venv

# The fixtures are kernels: their own tests run against their wheels (factory build --test),
# never in the factory's suite.
collect_ignore_glob = ["fixtures/*"]

# The fixtures several test modules share.
pytest_plugins = ["tests.support.browser", "tests.support.cli", "tests.support.docker",
                  "tests.support.hostile", "tests.support.workflows"]

# The property tests check what the code does with each example, not how fast: on a machine
# busy with the container tests, drawing or running one example can take seconds.
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")

# Every factory the tests start keeps its objects under one key (a CI secret's stand-in), so
# that builds sharing the tests' cache reuse each other's objects, and nothing is written to
# the user's configuration folder.
os.environ.setdefault("KERNEL_WHEEL_FACTORY_OBJECT_KEY", "the tests' object cache key")


@pytest.fixture
def kernel_factory(tmp_path: Path) -> Callable[..., Path]:
    def make(build_toml: str, files: dict[str, str] | None = None, package: str | None = None,
             name: str = "kernel") -> Path:
        return make_kernel(tmp_path / name, build_toml, files, package)
    return make


# Set before any test runs, so every factory a test starts (in a subprocess or in-process)
# that is not given a cache of its own uses the tests' cache, not the user's.
os.environ["KERNEL_WHEEL_FACTORY_CACHE"] = str(TEST_CACHE)
# Every factory of the run compiles in one folder (set here, before the workers start, which
# inherit it): the objects the tests' cache keeps name the folder they were compiled in (nvcc
# hashes it into them), so one fixed folder is what lets every worker, and the next run, reuse
# them, and what lets a test build a session fixture's output again unchanged. Builds of one
# cell take turns in it.
os.environ.setdefault("KERNEL_WHEEL_FACTORY_BUILD_ROOT", "/tmp/kernel-wheel-factory/tests/main")
# Likewise no factory a test starts looks the wheels' names up on PyPI (its answers change);
# the tests of that check give it an index served from the test.
os.environ["KERNEL_WHEEL_FACTORY_NAME_INDEX"] = "off"


@pytest.fixture(scope="session")
def factory_cache() -> Path:
    """Toolkits and torch environments for the slow tests, shared by the whole run."""
    TEST_CACHE.mkdir(parents=True, exist_ok=True)
    return TEST_CACHE


@pytest.fixture(scope="session")
def example_build(tmp_path_factory: pytest.TempPathFactory,
                  factory_cache: Path) -> tuple[Path, Result]:
    """The shipped example built for the tests' torch (2.11 with CUDA 13.0, sm_90), which the
    tests' cache and their torch environments hold; README.md's own line (the newest torch,
    as matrix.lock pins it) is built by test_build.py."""
    folder = tmp_path_factory.mktemp("example")
    out = folder / "index"
    matrix = one_cell_matrix(folder, EXAMPLE).read_text().replace("runner: local\n", "")
    result = run_factory("build", write(folder / "matrix.yaml", matrix), "--out", out,
                         env=cache_env(factory_cache))
    assert result.exit == 0, result.stdout + result.stderr
    return out, result


@pytest.fixture(scope="session")
def example_tested(example_build: tuple[Path, Result], tmp_path_factory: pytest.TempPathFactory,
                   factory_cache: Path) -> tuple[Path, Result]:
    """A copy of the example's output folder after `factory test matrix.yaml` ran on it."""
    import shutil

    out = Path(shutil.copytree(example_build[0], tmp_path_factory.mktemp("tested") / "index",
                               symlinks=True))
    result = run_factory("test", example_build[0].parent / "matrix.yaml", "--out", out,
                         env=cache_env(factory_cache))
    return out, result


@pytest.fixture(scope="session")
def cuobjdump(factory_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """NVIDIA's cuobjdump, from PyPI (the CUDA 13 toolkit's own package)."""
    from uv import find_uv_bin

    target = tmp_path_factory.mktemp("cuobjdump")
    subprocess.run([find_uv_bin(), "pip", "install", "--quiet", "--target", target,
                    "nvidia-cuda-cuobjdump>=13,<14"], check=True,
                   env={**os.environ, "UV_CACHE_DIR": str(factory_cache / "uv")})
    (found,) = target.rglob("bin/cuobjdump")
    return found


@pytest.fixture(scope="session")
def stable_build(tmp_path_factory: pytest.TempPathFactory,
                 factory_cache: Path) -> tuple[Path, Result]:
    """The stable-ABI fixture kernel built for torch 2.11, 2.12 and 2.13: its output folder
    and the build's output."""
    folder = tmp_path_factory.mktemp("stable")
    out = folder / "index"
    result = run_factory("build", stable_matrix(folder), "--out", out,
                         env=cache_env(factory_cache))
    assert result.exit == 0, result.stdout + result.stderr
    return out, result


@pytest.fixture(scope="session")
def example_wheel(example_build: tuple[Path, Result]) -> Path:
    out, _ = example_build
    wheels = sorted((out / "files").glob("*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="session")
def torch_venv(tmp_path_factory: pytest.TempPathFactory, factory_cache: Path) -> Path:
    """A fresh virtual environment with torch 2.11 (from PyPI) and pytest, made with uv."""
    return new_torch_venv(tmp_path_factory.mktemp("venv") / "torch211", factory_cache)


# Where the suite's time goes, per file (setup, call and teardown; a session fixture counts
# where it is first used): the slowest files after the run, and all of them in
# test-artifacts/test-times.json, to compare runs; each test's setup and call in
# test-artifacts/test-times-by-test.json, to see where a file's time goes.
_FILE_SECONDS: dict[str, float] = {}
_TEST_SECONDS: dict[str, dict[str, float]] = {}


# The suite runs in worker processes (pytest-xdist, a file to a worker, so that a module's
# fixtures are made once); the files that took longest last time (tests/file-times.json, a
# copy of a run's test-artifacts/test-times.json) are handed out first, so that the run does
# not end with one worker on a long file and the others idle. A file not listed there counts
# as quick.
FILE_TIMES = REPO / "tests" / "file-times.json"


@pytest.hookimpl(trylast=True)  # after pytest groups the items by their fixtures
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    seconds = json.loads(FILE_TIMES.read_text()) if FILE_TIMES.is_file() else {}
    # a stable sort: each file's tests keep their order and stay together
    items.sort(key=lambda item: -seconds.get(item.nodeid.split("::", 1)[0], 0.0))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = report.nodeid.split("::", 1)[0]
    _FILE_SECONDS[path] = _FILE_SECONDS.get(path, 0.0) + report.duration
    _TEST_SECONDS.setdefault(report.nodeid, {})[report.when] = round(report.duration, 1)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _FILE_SECONDS or "PYTEST_XDIST_WORKER" in os.environ:  # the controller writes them
        return
    ranked = sorted(_FILE_SECONDS.items(), key=lambda item: -item[1])
    terminalreporter.write_sep("-", "slowest test files")
    for path, seconds in ranked[:10]:
        terminalreporter.write_line(f"{seconds:8.1f} s  {path}")
    folder = REPO / "test-artifacts"
    folder.mkdir(exist_ok=True)
    (folder / "test-times.json").write_text(json.dumps(
        {path: round(seconds, 1) for path, seconds in ranked}, indent=1) + "\n")
    (folder / "test-times-by-test.json").write_text(json.dumps(dict(sorted(
        _TEST_SECONDS.items(), key=lambda item: -sum(item[1].values()))), indent=1) + "\n")
