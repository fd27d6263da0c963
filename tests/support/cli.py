"""A good kernel and matrix for bad-input tests, and what every rejection must look like."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import pytest

from .factory import Result, factory_main, snapshot, write

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


def assert_rejected(project: Path, result: Result, expected: str,
                    before: dict[str, bytes | None]) -> None:
    assert result.exit == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert expected in lines[0]
    assert lines[0].startswith("error: ")
    assert snapshot(project / "index") == before
    assert not (project / "cache").exists()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A folder with an output folder that already holds a published file."""
    out = tmp_path / "index"
    write(out / "files" / "published-1.0-py3-none-any.whl", "already here")
    write(out / "notes.txt", "keep me")
    return tmp_path


@pytest.fixture
def factory(project: Path, monkeypatch: pytest.MonkeyPatch,
            capsys: pytest.CaptureFixture[str]) -> Callable[..., Result]:
    """`factory ARGS...` in this process, from the project folder, with a cache of its own
    (which must never be made) and `env` set."""
    monkeypatch.chdir(project)
    monkeypatch.setenv("KERNEL_WHEEL_FACTORY_CACHE", str(project / "cache"))

    def run(*args: str, env: dict[str, str] | None = None) -> Result:
        for name, value in (env or {}).items():
            monkeypatch.setenv(name, value)
        return factory_main(*args, capsys=capsys)
    return run


def option_strings(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    """Each subcommand's option strings (help left out)."""
    commands = next(action for action in parser._actions
                    if isinstance(action, argparse._SubParsersAction))
    return {name: [flag for action in sub._actions for flag in action.option_strings
                   if flag not in ("-h", "--help")]
            for name, sub in commands.choices.items()}


SECRETS = {"TWINE_PASSWORD": "pypi-s3cret", "HF_TOKEN": "hf_s3cret", "GITHUB_TOKEN": "ghp_s3cret",
           "AWS_SECRET_ACCESS_KEY": "aws-s3cret", "SOMETHING_ELSE": "any-value"}
