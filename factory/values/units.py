"""Sizes as people write them (7G, 7.5GiB, 100M, 12000000000: binary units, with or without
the B) and as the factory prints them (12.3 MiB); durations as people write them (5h30m, 90s)."""

from __future__ import annotations

import re

__all__ = ["human_size", "parse_duration", "parse_size"]

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


_DURATION = re.compile(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")
_DURATION_UNITS = (3600, 60, 1)


def parse_duration(text: str) -> float:
    """Seconds, from 5h30m, 330m, 90s or 19800; a ValueError, worded for the user, when `text`
    is not a duration from one second to a year."""
    cleaned = text.strip().lower()
    if cleaned.isdigit():
        seconds = float(cleaned)
    else:
        parts = _DURATION.fullmatch(cleaned)
        if not parts or not cleaned:
            raise ValueError(f"'{text}' is not a duration (e.g. 5h30m, 330m, 90s, 19800)")
        seconds = float(sum(int(value or 0) * unit
                            for value, unit in zip(parts.groups(), _DURATION_UNITS, strict=True)))
    if not 1 <= seconds <= 366 * 86400:
        raise ValueError(f"'{text}' must be between 1 second and a year")
    return seconds


def human_size(count: int) -> str:
    """12.3 MiB, 2.0 GiB, 912 bytes."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count} bytes"
