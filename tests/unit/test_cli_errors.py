"""Bad input through the `factory` command, run in-process: one line naming file, line and key,
exit status 2, and nothing written (the output folder stays byte for byte as it was, no cache
is made)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..support.cli import GOOD_KERNEL, GOOD_MATRIX, SOURCES, assert_rejected
from ..support.factory import Result, make_kernel, snapshot, write


def test_bad_source_date_epoch(project: Path, factory: Callable[..., Result]) -> None:
    make_kernel(project / "demo", GOOD_KERNEL, SOURCES, package="demo")
    write(project / "matrix.yaml", GOOD_MATRIX)
    before = snapshot(project / "index")
    result = factory("build", "matrix.yaml", env={"SOURCE_DATE_EPOCH": "yesterday"})
    assert_rejected(project, result, "SOURCE_DATE_EPOCH: 'yesterday' is not a whole number of "
                    "seconds since 1970", before)
