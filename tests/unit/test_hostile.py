"""Hostile input, as a careless or malicious user gives it, through the `factory` command run
in-process: every case ends with exit status 2 (bad input) or 1 (the work failed), exactly one
error line, no traceback, no credential printed, the output folder byte for byte as it was,
and no cache made.

The cases are a table: matrix.yaml texts, build.toml texts, arguments of every subcommand, and
output, cache and lock folders in states they should never be in."""

from __future__ import annotations

from ..support.hostile import CASES


def test_the_table_is_big_enough() -> None:
    assert len(CASES) >= 380, len(CASES)
