"""The offline builder base images the docker tests build on, each made once per machine."""

from __future__ import annotations

import os
import subprocess

import pytest

from .factory import REPO
from .system import docker_engine, made_once

BASE = "kernel-wheel-factory/base:bullseye"  # glibc 2.31, g++ 10: torch 2.13 and older
NEWEST_BASE = "kernel-wheel-factory/base:bookworm"  # g++ 12: every torch, the newest included


def debian_base(suite: str, image: str, pythons: tuple[str, ...]) -> str:
    """The offline base image of a Debian release with (at least) the CPythons the tests
    use there, made by docker/make-debian-base.sh when it is not there or lacks one of them.
    Workers and test runs on this machine make it one at a time: whoever waits finds it
    made."""
    docker_engine()
    interpreters = [f"/opt/python/cp{series.replace('.', '')}-cp{series.replace('.', '')}"
                    "/bin/python" for series in pythons]
    with made_once(f"base-{suite}"):
        if subprocess.run(["docker", "run", "--rm", "--network", "none", image, "sh", "-c",
                           " && ".join(f"test -x {path}" for path in interpreters)],
                          capture_output=True).returncode:
            done = subprocess.run([str(REPO / "docker" / "make-debian-base.sh"), suite, image],
                                  capture_output=True, text=True,
                                  env={**os.environ, "PYTHONS": " ".join(pythons)})
            assert done.returncode == 0, done.stdout + done.stderr
    return image


@pytest.fixture(scope="session")
def bullseye_base() -> str:
    """With both CPythons, built from source (bullseye packages neither): the per-Python
    wheels of the setup.py example are built here."""
    return debian_base("bullseye", BASE, ("3.11", "3.13"))


@pytest.fixture(scope="session")
def bookworm_base() -> str:
    """With the CPython the factory runs on, bookworm's own 3.11: the newest torch's
    abi3 wheel is built here."""
    return debian_base("bookworm", NEWEST_BASE, ("3.11",))
