"""Dotted numeric versions as build.toml and matrix.yaml use them ("2.11", "13.0", "12.8.1")."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import total_ordering

_VERSION = re.compile(r"\d+(\.\d+)*")


@total_ordering
@dataclass(frozen=True)
class Version:
    """A dotted version compared numerically, trailing zeros ignored ("2.10.0" == "2.10")."""

    parts: tuple[int, ...]

    @classmethod
    def parse(cls, text: str) -> Version:
        text = text.strip()
        if not _VERSION.fullmatch(text):
            raise ValueError(f"'{text}' is not a version like 2.11 or 13.0")
        return cls(tuple(int(part) for part in text.split(".")))

    @property
    def _key(self) -> tuple[int, ...]:
        parts = list(self.parts)
        while len(parts) > 1 and parts[-1] == 0:
            parts.pop()
        return tuple(parts)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Version) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __lt__(self, other: Version) -> bool:
        return self._key < other._key

    @property
    def major(self) -> int:
        return self.parts[0]

    @property
    def minor(self) -> int:
        return self.parts[1] if len(self.parts) > 1 else 0

    def major_minor(self) -> Version:
        return Version((self.major, self.minor))

    def __str__(self) -> str:
        return ".".join(str(part) for part in self.parts)

    def compact(self) -> str:
        """The digits without dots, as in local labels: 13.0 -> "130", 2.11 -> "211"."""
        return "".join(str(part) for part in self.parts)
