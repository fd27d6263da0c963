"""Sizes as people write them (7G, 7.5GiB, 100M, 12000000000: binary units, with or without
the B) and as the factory prints them (12.3 MiB)."""

from __future__ import annotations

import re

__all__ = ["human_size", "parse_size"]

_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*")


def parse_size(text: str) -> int:
    """Bytes; a ValueError, worded for the user, when `text` is not a usable size."""
    match = _SIZE.fullmatch(text.lower())
    if not match:
        raise ValueError(f"'{text}' is not a size (e.g. 7G, 7.5GiB, 4096M)")
    number = float(match[1])  # 400 digits read as infinity: no size
    if not number * _UNITS[match[2]] <= 2**60:
        raise ValueError(f"'{text}' is not a usable size")
    value = int(number * _UNITS[match[2]])
    if value < 1:
        raise ValueError(f"'{text}' is not a usable size")
    return value


def human_size(count: int) -> str:
    """12.3 MiB, 2.0 GiB, 912 bytes."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count} bytes"
