"""tests/unit is pure: a test here that starts a process (git, a compiler, docker, a second
interpreter) fails, naming the command, and belongs in tests/integration/."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest

# Python's audit events for starting a program; one hook (hooks cannot be removed) checks a
# flag that only the fixture below raises.
_STARTS = {"subprocess.Popen", "os.system", "os.posix_spawn", "os.spawn", "os.exec", "os.fork",
           "os.forkpty", "pty.spawn"}
_pure: dict[str, str | None] = {"test": None}


def _refuse(event: str, args: tuple[Any, ...]) -> None:
    if _pure["test"] is not None and event in _STARTS:
        raise RuntimeError(f"{_pure['test']} started a process ({event} {args[:2]!r}): tests "
                           "that run programs belong in tests/integration/")


sys.addaudithook(_refuse)


@pytest.fixture(autouse=True)
def _no_process(request: pytest.FixtureRequest) -> Iterator[None]:
    _pure["test"] = request.node.nodeid
    try:
        yield
    finally:
        _pure["test"] = None
