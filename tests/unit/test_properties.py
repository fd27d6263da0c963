"""Properties of the values every plan is made of, over generated inputs: release numbers,
local labels and compute capabilities read back as what was written."""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from packaging.version import Version

from factory import defaults
from factory.plan.labels import render_label
from factory.policy.capabilities import Capability
from factory.values.versions import compact, major_minor, parse_release

releases = st.lists(st.integers(0, 999), min_size=1, max_size=4).map(
    lambda parts: ".".join(map(str, parts)))
two_part = st.tuples(st.integers(0, 99), st.integers(0, 99)).map(
    lambda pair: Version(f"{pair[0]}.{pair[1]}"))


@given(releases)
def test_a_dotted_release_reads_back_as_itself(text: str) -> None:
    version = parse_release(f" {text} ")
    assert version == Version(text) and str(version) == str(Version(text))
    assert major_minor(version) <= version
    assert compact(version) == "".join(str(part) for part in Version(text).release)


@given(st.text(min_size=1, max_size=12).filter(
    lambda text: not re.fullmatch(r"[0-9]+(\.[0-9]+)*", text.strip())))
@example("\u0661\u0662.\u0660")  # digits, but not ASCII ones
def test_anything_else_is_refused_in_the_users_words(text: str) -> None:
    with pytest.raises(ValueError, match=r"is not a version like 2\.11 or 13\.0"):
        parse_release(text)


@given(two_part, two_part)
def test_the_default_label_is_a_local_version_label_of_its_torch_and_cuda(torch: Version,
                                                                          cuda: Version) -> None:
    label = render_label(defaults.LABEL_TEMPLATE, torch, cuda)
    assert label == f"cu{cuda.major}{cuda.minor}torch{torch.major}{torch.minor}"
    assert Version(f"1.0.0+{label}").local == label


capabilities = st.builds(Capability, st.integers(1, 20), st.integers(0, 9),
                         st.sampled_from(["", "a", "f"]), st.booleans())


@given(capabilities)
def test_a_capability_reads_back_from_its_text(capability: Capability) -> None:
    assert Capability.parse(str(capability)) == capability
    assert capability.arch == f"{capability.major}{capability.minor}{capability.variant}"
    assert capability.without_ptx().without_ptx() == capability.without_ptx()
    assert not capability.without_ptx().ptx and capability.base == Version(
        f"{capability.major}.{capability.minor}")
