"""CPython versions as matrix.yaml writes them: "3.12", or "3.14t" for the free-threaded build
of 3.14 (PEP 703), whose wheels carry their own ABI tag (cp314t) and which loads no abi3
extension module."""

from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.version import Version

__all__ = ["FREE_THREADED_SINCE", "CPython"]

FREE_THREADED_SINCE = Version("3.13")  # the first CPython with a free-threaded build

_TEXT = re.compile(r"3\.([0-9]+)(t?)")  # ASCII digits only: \d also matches other scripts


@dataclass(frozen=True, order=True)
class CPython:
    """A CPython series (major.minor), with or without the GIL."""

    version: Version
    free_threaded: bool = False

    @classmethod
    def parse(cls, text: str) -> CPython:
        """3.N or 3.Nt; ValueError, worded for the user, for anything else."""
        found = _TEXT.fullmatch(text.strip())
        if found is None:
            raise ValueError(f"give a CPython as 3.N or, free-threaded, 3.Nt (e.g. 3.12, 3.14t), "
                             f"got '{text.strip()}'")
        python = cls(Version(f"3.{found.group(1)}"), bool(found.group(2)))
        if python.free_threaded and python.version < FREE_THREADED_SINCE:
            raise ValueError(f"CPython {python.version} has no free-threaded build (it starts "
                             f"with {FREE_THREADED_SINCE}t)")
        return python

    @property
    def major(self) -> int:
        return self.version.major

    @property
    def minor(self) -> int:
        return self.version.minor

    @property
    def series(self) -> str:
        """3.14, whether free-threaded or not."""
        return f"{self.major}.{self.minor}"

    @property
    def interpreter_tag(self) -> str:
        """The wheel's Python tag: cp314 for 3.14 and 3.14t alike."""
        return f"cp{self.major}{self.minor}"

    @property
    def abi_tag(self) -> str:
        """The wheel's ABI tag: cp314, or cp314t for the free-threaded build."""
        return self.interpreter_tag + ("t" if self.free_threaded else "")

    def describe(self) -> str:
        """CPython 3.12, or free-threaded CPython 3.14t."""
        return f"{'free-threaded ' if self.free_threaded else ''}CPython {self}"

    def __str__(self) -> str:
        return self.series + ("t" if self.free_threaded else "")
