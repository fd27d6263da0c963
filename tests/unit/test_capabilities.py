"""Compute capabilities: parsing, kernel-builder's loose intersection, -gencode flags."""

from __future__ import annotations

from typing import Any

import pytest
from packaging.version import Version

from factory.compile.commands import gencode_flags
from factory.policy import cuda_policy
from factory.policy.capabilities import (
    Capability,
    check_supported,
    loose_intersection,
    with_ptx_for_newest,
)

from ..support.checks import present


def caps(*texts: str) -> list[Capability]:
    return [Capability.parse(text) for text in texts]


def sms(*texts: str) -> list[Version]:
    return [Version(text) for text in texts]


def test_parse_and_print() -> None:
    assert [str(c) for c in caps("8.0", "9.0a", "10.0f", "12.0+PTX", "9.0a+PTX")] == [
        "8.0", "9.0a", "10.0f", "12.0+PTX", "9.0a+PTX"]
    assert Capability.parse("9.0a").arch == "90a"
    assert Capability.parse("11.8").is_known is False
    for bad in ("9", "9.0b", "sm_90", "9.00", "+PTX", ""):
        with pytest.raises(ValueError):
            Capability.parse(bad)


@pytest.mark.parametrize("declared, targets, expected", [
    # Each target takes the highest declared capability of its major that is not above it.
    (["8.0", "9.0+PTX"], ["8.0", "8.6", "9.0"], ["8.0", "9.0+PTX"]),
    (["8.0", "8.9"], ["8.6", "8.9"], ["8.0", "8.9"]),
    # SASS never crosses a major version...
    (["8.0"], ["9.0"], []),
    # ...but a capability with PTX may serve a later major.
    (["7.5+PTX"], ["8.0", "9.0"], ["7.5+PTX"]),
    # An arch-specific variant is kept only where its base is a target, and replaces it.
    (["8.6", "9.0a"], ["8.0", "8.6", "9.0"], ["8.6", "9.0a"]),
    (["9.0a"], ["8.0"], []),
    (["10.0f", "12.0"], ["10.0", "12.0"], ["10.0f", "12.0"]),
    # Nothing above the target is ever taken.
    (["9.0"], ["8.0", "8.6"], []),
])
def test_loose_intersection(declared: list[str], targets: list[str],
                            expected: list[Any] | list[str]) -> None:
    assert [str(c) for c in loose_intersection(caps(*declared), sms(*targets))] == expected


def test_ptx_for_the_newest_sm_only() -> None:
    assert [str(c) for c in with_ptx_for_newest(sms("9.0", "8.0", "12.0"), ptx=True)] == [
        "8.0", "9.0", "12.0+PTX"]
    assert [str(c) for c in with_ptx_for_newest(sms("9.0", "8.0"), ptx=False)] == ["8.0", "9.0"]


def test_gencode_flags() -> None:
    assert gencode_flags(caps("9.0+PTX", "8.0", "9.0a")) == [
        "-gencode=arch=compute_80,code=sm_80",
        "-gencode=arch=compute_90,code=sm_90",
        "-gencode=arch=compute_90,code=compute_90",
        "-gencode=arch=compute_90a,code=sm_90a",
    ]


@pytest.mark.parametrize("capability, cuda, problem", [
    ("7.0", "13.0", "CUDA 13.0 cannot compile for sm_70"),
    ("7.0", "12.8", None),
    ("10.1", "13.0", "CUDA 13.0 cannot compile for sm_101"),
    ("11.0", "12.9", "CUDA 12.9 cannot compile for sm_110"),
    ("9.0a", "12.4", None),
    ("10.0f", "12.8", "CUDA 12.8 has no family-specific variant sm_100f"),
    ("10.0f", "12.9", None),
    ("8.6a", "13.0", "CUDA 13.0 has no arch-specific variant sm_86a"),
])
def test_what_each_toolkit_can_build(capability: str, cuda: str, problem: str | None) -> None:
    version = Version(cuda)
    found = check_supported(Capability.parse(capability), present(cuda_policy(version)), version)
    assert (found is None) if problem is None else (problem in present(found))


def test_default_lists_follow_kernel_builder() -> None:
    assert [str(s) for s in present(cuda_policy(Version("12.6"))).default] == [
        "7.0", "7.2", "7.5", "8.0", "8.6", "8.7", "8.9", "9.0"]
    assert [str(s) for s in present(cuda_policy(Version("12.8"))).default] == [
        "7.0", "7.2", "7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "10.1", "12.0"]
    assert [str(s) for s in present(cuda_policy(Version("13.0"))).default] == [
        "7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "11.0", "12.0", "12.1"]
    assert cuda_policy(Version("11.8")) is None
