"""The C++ standard a torch release's headers demand of the host compiler, and the reason a
compiler that does not give it is turned away with (toolchain/standard.py, pure)."""

from __future__ import annotations

import pytest

from factory.policy import cxx_standards, torch_releases
from factory.toolchain.standard import (
    CompilerStandard,
    cxx_standard,
    header_standard,
    standard_shortfall,
)
from factory.ui.plan import compiler_needed
from factory.values.versions import parse_release


@pytest.mark.parametrize(("torch", "demanded", "compiled"), [
    ("2.11", "17", "17"), ("2.13", "17", "20"), ("2.14", "20", "20"), ("2.15", "20", "20"),
    ("2.16", "20", "20"),  # a release newer than the table: the newest known one's
])
def test_each_release_demands_the_standard_its_headers_check(torch: str, demanded: str,
                                                             compiled: str) -> None:
    assert header_standard(parse_release(torch)).name == demanded
    assert cxx_standard(parse_release(torch)) == compiled


def test_every_release_compiles_with_a_standard_its_headers_accept() -> None:
    standards = cxx_standards()
    for release in torch_releases().values():
        assert release.header_std in standards and release.cxx_std in standards, release
        assert standards[release.cxx_std].cplusplus >= standards[release.header_std].cplusplus


def test_cxx20_needs_the_value_g_plus_plus_10_does_not_set() -> None:
    need = cxx_standards()["20"]
    assert (need.cplusplus, need.gcc) == (202002, 11)
    assert need.cplusplus > 201709  # what g++ 10 sets for -std=c++20


def test_a_compiler_short_of_the_headers_standard_is_named_with_what_it_gave() -> None:
    gcc10 = CompilerStandard("20", 201709, "10.2.1")
    assert standard_shortfall(parse_release("2.15"), "g++", "the PATH ($CXX unset)", gcc10) == (
        "torch 2.15's headers need C++20 (__cplusplus 202002L: g++ 11 or newer), and the host "
        "compiler g++ 10.2.1 (from the PATH ($CXX unset)) sets __cplusplus to 201709L for "
        "-std=c++20")
    # the same compiler is enough for torch 2.13, whose headers check C++17
    assert standard_shortfall(parse_release("2.13"), "g++", "$CXX", gcc10) is None


def test_a_compiler_that_refuses_the_flag_is_named_with_its_error() -> None:
    refused = CompilerStandard("20", None, error="g++: error: unrecognized command-line option")
    said = standard_shortfall(parse_release("2.14"), "/opt/old/g++", "$CXX", refused)
    assert said == ("torch 2.14's headers need C++20 (__cplusplus 202002L: g++ 11 or newer), "
                    "and the host compiler /opt/old/g++ (from $CXX) refuses -std=c++20 "
                    "(g++: error: unrecognized command-line option)")


def test_a_compiler_that_gives_the_standard_passes() -> None:
    gcc12 = CompilerStandard("20", 202002, "12.2.0")
    assert standard_shortfall(parse_release("2.15"), "g++", "$CXX", gcc12) is None


def test_the_plan_names_the_compiler_a_torch_needs() -> None:
    assert compiler_needed(parse_release("2.15")) == \
        "g++ 11 or newer (torch 2.15's headers need C++20)"
    assert compiler_needed(parse_release("2.11")) == \
        "g++ 7 or newer (torch 2.11's headers need C++17)"
