"""The offline builder base images the docker tests build on, each made once per machine."""

from __future__ import annotations

import subprocess

import pytest

from .factory import REPO
from .system import docker_engine, made_once

BASE = "kernel-wheel-factory/base:bullseye"  # glibc 2.31, g++ 10: torch 2.13 and older
NEWEST_BASE = "kernel-wheel-factory/base:bookworm"  # g++ 12: every torch, the newest included


def debian_base(suite: str, image: str) -> str:
    """The offline base image of a Debian release, made by docker/make-debian-base.sh when it
    is not there (or is an older one, without the second CPython). Workers and test runs on
    this machine make it one at a time: whoever waits finds it made."""
    docker_engine()
    with made_once(f"base-{suite}"):
        if subprocess.run(["docker", "run", "--rm", "--network", "none", image, "test", "-x",
                           "/opt/python/cp313-cp313/bin/python"],
                          capture_output=True).returncode:
            done = subprocess.run([str(REPO / "docker" / "make-debian-base.sh"), suite, image],
                                  capture_output=True, text=True)
            assert done.returncode == 0, done.stdout + done.stderr
    return image


@pytest.fixture(scope="session")
def bullseye_base() -> str:
    return debian_base("bullseye", BASE)


@pytest.fixture(scope="session")
def bookworm_base() -> str:
    return debian_base("bookworm", NEWEST_BASE)
