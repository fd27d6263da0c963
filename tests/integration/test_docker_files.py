"""docker/: every Dockerfile passes hadolint and every script passes shellcheck (both from
PyPI, as the test extras install them)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from ..support.factory import REPO
from ..support.system import tool

DOCKER = REPO / "docker"


@pytest.mark.parametrize("dockerfile", sorted(DOCKER.glob("*Dockerfile")), ids=lambda p: p.name)
def test_dockerfiles_pass_hadolint(dockerfile: Any) -> None:
    done = subprocess.run([tool("hadolint"), "--no-color", dockerfile], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("script", sorted(DOCKER.glob("*.sh")), ids=lambda p: p.name)
def test_scripts_pass_shellcheck(script: Any) -> None:
    done = subprocess.run([tool("shellcheck"), script], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_linters_do_find_problems(tmp_path: Path) -> None:
    """Neither check passes everything: a bad Dockerfile and a bad script are refused."""
    bad_dockerfile = tmp_path / "bad.Dockerfile"
    bad_dockerfile.write_text("FROM debian\nRUN apt-get install foo\n")
    assert subprocess.run([tool("hadolint"), bad_dockerfile], capture_output=True).returncode
    bad_script = tmp_path / "bad.sh"
    bad_script.write_text("#!/bin/bash\nrm -rf $1/*\n")
    assert subprocess.run([tool("shellcheck"), bad_script], capture_output=True).returncode
