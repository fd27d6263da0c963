"""Stand-in for the `kernels` package in a `factory test` environment: a kernel's tests that
load themselves with `get_kernel("org/name")` get the wheel installed here, never a download.
$KERNEL_WHEEL_FACTORY_KERNEL names the kernel (its import name)."""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Any

__all__ = ["get_kernel", "get_local_kernel", "has_kernel", "load_kernel"]

_INSTALLED = os.environ.get("KERNEL_WHEEL_FACTORY_KERNEL", "")


def _installed(repo_id: str) -> ModuleType:
    wanted = repo_id.rstrip("/").rsplit("/", 1)[-1].replace("-", "_")
    if wanted != _INSTALLED:
        raise ModuleNotFoundError(
            f"{repo_id}: only the kernel under test ({_INSTALLED}) is installed here")
    return importlib.import_module(_INSTALLED)


def get_kernel(repo_id: str, *args: Any, **kwargs: Any) -> ModuleType:
    return _installed(repo_id)


def load_kernel(repo_id: str, *args: Any, **kwargs: Any) -> ModuleType:
    return _installed(repo_id)


def get_local_kernel(*args: Any, **kwargs: Any) -> ModuleType:
    return importlib.import_module(_INSTALLED)


def has_kernel(repo_id: str, *args: Any, **kwargs: Any) -> bool:
    try:
        _installed(repo_id)
    except ImportError:
        return False
    return True
