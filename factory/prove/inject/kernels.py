"""Stand-in for the `kernels` package in a `factory test` environment: a kernel's tests that
load themselves with `get_kernel("org/name")` get the wheel installed here, never a download.
$KERNEL_WHEEL_FACTORY_KERNEL names the kernel (its import name). Whatever repo id a test asks
for (its own, a fork's, a scratch repo's), it gets the kernel under test; each id asked for is
added to the file $KERNEL_WHEEL_FACTORY_STAND_IN names, so the factory's log says which."""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Any

__all__ = ["get_kernel", "get_local_kernel", "has_kernel", "load_kernel"]

_INSTALLED = os.environ.get("KERNEL_WHEEL_FACTORY_KERNEL", "")
_ASKED = os.environ.get("KERNEL_WHEEL_FACTORY_STAND_IN", "")


def _installed(asked: str) -> ModuleType:
    if _ASKED:
        printable = "".join(char for char in asked if char.isprintable())[:200]
        with open(_ASKED, "a", encoding="utf-8") as handle:
            handle.write(printable + "\n")
    return importlib.import_module(_INSTALLED)


def get_kernel(repo_id: str, *args: Any, **kwargs: Any) -> ModuleType:
    return _installed(str(repo_id))


def load_kernel(repo_id: Any, *args: Any, **kwargs: Any) -> ModuleType:
    return _installed(str(repo_id))


def get_local_kernel(*args: Any, **kwargs: Any) -> ModuleType:
    return _installed(str(args[0]) if args else "a local kernel")


def has_kernel(repo_id: str, *args: Any, **kwargs: Any) -> bool:
    return True
