"""Size settings as data: how each GPU code compression mode reaches nvcc per CUDA major, the
size limits and hosts' presets, and the compression a matrix gives each kernel's cells."""

from __future__ import annotations

from typing import Any

import pytest

from factory.compile.commands import compression_flags
from factory.config.model import SIZE_PRESETS, CompressMode, parse_size_limit
from factory.values.units import human_size, parse_size
from factory.values.versions import parse_release


@pytest.mark.parametrize("mode, cuda, flags", [
    ("size", "13.0", ["--compress-mode=size"]),
    ("balance", "13.0", ["-Xfatbin=-compress-all", "--compress-mode=balance"]),
    ("speed", "13.2", ["-Xfatbin=-compress-all", "--compress-mode=speed"]),
    ("none", "13.0", ["--compress-mode=none"]),
    ("size", "12.8", ["-Xfatbin=-compress-all"]),
    ("balance", "12.6", ["-Xfatbin=-compress-all"]),
    ("none", "12.8", []),
    (None, "13.0", []),  # a cell recorded before compression was a setting
])
def test_compression_modes_reach_nvcc(mode: CompressMode | None, cuda: str,
                                      flags: list[Any] | list[str]) -> None:
    assert compression_flags(mode, parse_release(cuda)) == flags


def test_size_limits_and_presets() -> None:
    assert parse_size_limit("pypi").bytes == 100 * 2**20 == SIZE_PRESETS["pypi"]
    assert parse_size_limit("github-release").bytes == 2 * 2**30
    assert parse_size_limit("100M").bytes == parse_size("100MiB") == 100 * 2**20
    assert parse_size_limit("1.5GiB").bytes == 3 * 2**29
    assert parse_size_limit("pypi").describe() == "pypi's limit of 100.0 MiB"
    assert parse_size_limit("20K").describe() == "the limit of 20.0 KiB"
    for bad in ("lots", "0", "-5M", "10 parsecs"):
        with pytest.raises(ValueError, match="not a"):
            parse_size_limit(bad)
    assert [human_size(n) for n in (912, 2048, 50_108_046, 3 * 2**30)] == [
        "912 bytes", "2.0 KiB", "47.8 MiB", "3.0 GiB"]
