"""Bad input through the `factory` command, run in-process: one line naming file, line and key,
exit status 2, and nothing written (the output folder stays byte for byte as it was, no cache
is made)."""

from __future__ import annotations

import pytest

from ..conftest import factory_main, make_kernel, snapshot, write

GOOD_KERNEL = """
[general]
name = "demo"
version = 1
license = "MIT"
backends = ["cuda"]

[torch]
src = ["torch-ext/torch_binding.cpp"]

[kernel.demo]
backend = "cuda"
depends = ["torch"]
src = ["csrc/demo.cu"]
"""
SOURCES = {"csrc/demo.cu": "", "torch-ext/torch_binding.cpp": ""}

GOOD_MATRIX = """
kernels:
  - path: demo
    version: 1.0.0
torch: ["2.11"]
cuda:
  "13.0":
    sms: ["9.0"]
"""


@pytest.fixture
def project(tmp_path):
    """A folder with an output folder that already holds a published file."""
    out = tmp_path / "index"
    write(out / "files" / "published-1.0-py3-none-any.whl", "already here")
    write(out / "notes.txt", "keep me")
    return tmp_path


@pytest.fixture
def factory(project, monkeypatch, capsys):
    """`factory ARGS...` in this process, from the project folder, with a cache of its own
    (which must never be made) and `env` set."""
    monkeypatch.chdir(project)
    monkeypatch.setenv("KERNEL_WHEEL_FACTORY_CACHE", str(project / "cache"))

    def run(*args: str, env: dict[str, str] | None = None):
        for name, value in (env or {}).items():
            monkeypatch.setenv(name, value)
        return factory_main(*args, capsys=capsys)
    return run


def assert_rejected(project, result, expected: str, before: dict) -> None:
    assert result.exit == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert expected in lines[0]
    assert lines[0].startswith("error: ")
    assert snapshot(project / "index") == before
    assert not (project / "cache").exists()


def test_bad_source_date_epoch(project, factory):
    make_kernel(project / "demo", GOOD_KERNEL, SOURCES, package="demo")
    write(project / "matrix.yaml", GOOD_MATRIX)
    before = snapshot(project / "index")
    result = factory("build", "matrix.yaml", env={"SOURCE_DATE_EPOCH": "yesterday"})
    assert_rejected(project, result, "SOURCE_DATE_EPOCH: 'yesterday' is not a whole number of "
                    "seconds since 1970", before)
