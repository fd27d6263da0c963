"""Release numbers as matrix.yaml, build.toml and the toolkits write them ("2.11", "13.0",
"12.8.1"), held as packaging's Version: it compares them numerically and ignores trailing
zeros ("2.10.0" == "2.10"). These helpers accept only plain dotted numbers."""

from __future__ import annotations

import re

from packaging.version import Version

__all__ = ["Version", "compact", "major_minor", "parse_release"]

_RELEASE = re.compile(r"[0-9]+(\.[0-9]+)*")  # ASCII digits only: \d also matches other scripts


def parse_release(text: str) -> Version:
    """A dotted release number; ValueError, worded for the user, for anything else."""
    text = text.strip()
    if not _RELEASE.fullmatch(text):
        raise ValueError(f"'{text}' is not a version like 2.11 or 13.0")
    return Version(text)


def major_minor(version: Version) -> Version:
    return Version(f"{version.major}.{version.minor}")


def compact(version: Version) -> str:
    """The digits without dots, as in local labels: 13.0 -> "130", 2.11 -> "211"."""
    return "".join(str(part) for part in version.release)
