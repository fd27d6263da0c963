"""A torch already installed: an interpreter the matrix (or --torch-python) names is read, not
changed, and decides the cell's label, torch pin, import guard and fingerprint. The fast tests
use a stand-in interpreter: this Python with a torch folder of its own on its path (version.py
and a libc10.so, which is all the probe reads); the slow one builds the example against a real
venv of torch 2.11, offline, in a network namespace with no network at all."""

from __future__ import annotations

import types
from typing import Any

import pytest

from factory.compile.generated import import_guard
from factory.config.torches import build_tag, is_release_build

from ..support.plans import NGC


@pytest.mark.parametrize(("version", "release", "tag"), [
    ("2.11.0", True, None),
    ("2.11.0+cu130", True, None),
    ("2.11.1+cpu", True, None),
    ("2.6.0+rocm6.2.4", True, None),
    (NGC, False, "nv2410"),
    ("2.8.0a0+5228986c39.nv25.06", False, "nv2506"),
    ("2.16.0.dev20261101+cu130", False, "t" + __import__("hashlib").sha256(
        b"2.16.0.dev20261101+cu130").hexdigest()[:8]),
    ("2.11.0+gitabc1234", False, "t" + __import__("hashlib").sha256(
        b"2.11.0+gitabc1234").hexdigest()[:8]),
])
def test_which_torch_builds_are_releases_and_what_other_builds_add(version: Any, release: bool,
        tag: Any) -> None:
    assert is_release_build(version) is release
    assert build_tag(version) == tag


def run_guard(guard: str, version: str, cuda: str | None) -> None:
    torch = types.SimpleNamespace(__version__=version, version=types.SimpleNamespace(cuda=cuda))
    exec(compile(guard, "_ops.py", "exec"), {"torch": torch})


def test_the_guard_of_an_exact_build_accepts_that_build_only() -> None:
    guard = import_guard("img2gray", "1.0+cu126torch25.nv2410", "2.5", "12.6",
                         "cu{cuda}torch{torch}", exact=NGC)
    run_guard(guard, NGC, "12.6")
    for other in ("2.5.0", "2.5.1+cu124", "2.5.0a0+e000cf0ad9.nv24.11"):
        with pytest.raises(ImportError, match=rf"built for torch {__import__('re').escape(NGC)} "
                                              r"and works with that torch build only"):
            run_guard(guard, other, "12.6")
    ordinary = import_guard("img2gray", "1.0+cu126torch25", "2.5", "12.6", "cu{cuda}torch{torch}")
    run_guard(ordinary, "2.5.1+cu126", "12.6")
