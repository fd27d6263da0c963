"""System packages some tests drive (Debian's chromium, later docker.io): installed on first use
with apt-get when the tests run as root on Debian, as on CI; elsewhere the test says what to
install instead of pretending the check passed."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest


def debian_package(package: str, command: str) -> str:
    """The path of `command`, installing Debian's `package` for it when it is missing."""
    found = shutil.which(command)
    if found:
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.fail(f"this test needs {command}: install Debian's {package} "
                    f"(apt-get install {package})")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", package]
    if subprocess.run(install, capture_output=True, env=env).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], capture_output=True, env=env)
        done = subprocess.run(install, capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
    found = shutil.which(command)
    assert found, f"apt-get installed {package}, but {command} is not on PATH"
    return found
