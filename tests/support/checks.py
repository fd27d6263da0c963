"""Small checks the tests share."""

from __future__ import annotations

from typing import TypeVar

_T = TypeVar("_T")


def present(value: _T | None) -> _T:
    """`value`, which the test expects to be there (None fails the test here)."""
    assert value is not None, "expected a value, found None"
    return value
