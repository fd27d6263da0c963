"""The builder image the docker tests build once per session."""

from __future__ import annotations

import subprocess

import pytest

from .factory import REPO
from .system import docker_engine

BASE = "kernel-wheel-factory/base:bullseye"


@pytest.fixture(scope="session")
def bullseye_base() -> str:
    """The offline base image, made by docker/make-debian-base.sh when it is not there (or is
    an older one, without the second CPython)."""
    docker_engine()
    if subprocess.run(["docker", "run", "--rm", "--network", "none", BASE, "test", "-x",
                       "/opt/python/cp313-cp313/bin/python"], capture_output=True).returncode:
        done = subprocess.run([str(REPO / "docker" / "make-debian-base.sh"), "bullseye", BASE],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
    return BASE
