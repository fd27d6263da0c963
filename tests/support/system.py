"""System packages some tests drive (Debian's chromium, docker.io): installed on first use
with apt-get when the tests run as root on Debian, as on CI; elsewhere the test says what to
install instead of pretending the check passed. What the machine's test workers share (its
packages, its docker engine and images) is made by one of them at a time (`made_once`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from factory.system.cache import exclusive

# Machine-wide, not in the tests' cache: docker images and system packages are the machine's,
# whichever cache a run uses.
LOCKS = Path(tempfile.gettempdir()) / "kernel-wheel-factory-tests" / "locks"


@contextmanager
def made_once(name: str) -> Iterator[None]:
    """Held while one worker (of this run or another on the machine) makes `name`, something
    they all share: the others wait, then find it made."""
    with exclusive(LOCKS / name):
        yield


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
    with made_once("apt"):  # dpkg takes one installer at a time
        if not shutil.which(command) and \
                subprocess.run(install, capture_output=True, env=env).returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], capture_output=True, env=env)
            done = subprocess.run(install, capture_output=True, text=True, env=env)
            assert done.returncode == 0, done.stdout + done.stderr
    found = shutil.which(command)
    assert found, f"apt-get installed {package}, but {command} is not on PATH"
    return found


def docker_engine() -> None:
    """A docker engine that answers; docker/ensure-engine.sh installs and starts one (Debian's
    docker.io) when the tests run as root on Debian."""
    from factory.system.engine import Engine

    if Engine().unavailable() is None:
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.fail(f"this test needs a docker engine: {Engine().unavailable()} (as root on "
                    "Debian, docker/ensure-engine.sh installs and starts one)")
    script = Path(__file__).resolve().parents[2] / "docker" / "ensure-engine.sh"
    with made_once("apt"):  # it installs Debian packages and starts one dockerd
        done = subprocess.run([str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    assert found, f"{name} is missing: pip install -e '.[test]'"
    return found
