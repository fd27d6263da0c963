"""The kinds of source behind one fetcher each: every kind the matrix names has one, and a kind
the factory does not know is refused, never taken for another."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest

from factory.config.model import SOURCE_KINDS, KernelEntry, SourceKind, SourceRequest
from factory.errors import ConfigError
from factory.sources.resolve import FETCHERS, Sources


def test_every_kind_of_source_has_its_fetcher(tmp_path: Path) -> None:
    assert sorted(FETCHERS) == sorted(SOURCE_KINDS)
    sources = Sources(tmp_path)
    assert {kind: sources.fetcher(kind).pinned for kind in SOURCE_KINDS} == {
        "path": False, "git": True, "hub": True}  # a lock pins a commit, not a folder


def test_a_kind_the_factory_does_not_know_is_refused(tmp_path: Path) -> None:
    request = SourceRequest(cast(SourceKind, "oci"), "registry.example/kernels/relu:1")
    entry = KernelEntry(request, "1.0.0", 7, index=2)
    with pytest.raises(ConfigError) as refused:
        Sources(tmp_path).resolve(entry, tmp_path / "matrix.yaml")
    assert str(refused.value) == (
        f"{tmp_path / 'matrix.yaml'}:7: kernels[2].oci: 'oci' is not a kind of source the "
        "factory fetches (path, git, hub)")
    assert not (tmp_path / "sources").exists()  # nothing fetched, nothing made
