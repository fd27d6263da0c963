"""Shared helpers: the real CLI in a subprocess, folder snapshots, kernels written on the fly,
and (for the slow tests) a persistent cache of toolkits and torch environments."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from factory.cache import default_cache_dir

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
EXAMPLE = REPO / "examples" / "img2gray"


@dataclass
class Result:
    exit: int
    stdout: str
    stderr: str


def run_factory(*args: str | Path, cwd: Path | None = None, env: dict | None = None) -> Result:
    """The installed `factory` command, as a user runs it."""
    completed = subprocess.run(
        [sys.executable, "-m", "factory", *[str(a) for a in args]], cwd=cwd,
        capture_output=True, text=True, env={**os.environ, "COLUMNS": "200", **(env or {})},
    )
    return Result(completed.returncode, completed.stdout, completed.stderr)


def snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every path under a folder with its bytes (None for folders): equal snapshots mean
    nothing was written, moved or removed."""
    if not folder.exists():
        return {}
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None)
            for p in sorted(folder.rglob("*"))}


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def make_kernel(root: Path, build_toml: str, files: dict[str, str] | None = None,
                package: str | None = None) -> Path:
    """A kernel repo on disk: its build.toml, the files it names, its Python package."""
    write(root / "build.toml", build_toml)
    for name, text in (files or {}).items():
        write(root / name, text)
    if package:
        write(root / "torch-ext" / package / "__init__.py", "")
    return root


@pytest.fixture
def kernel_factory(tmp_path):
    def make(build_toml: str, files: dict[str, str] | None = None, package: str | None = None,
             name: str = "kernel") -> Path:
        return make_kernel(tmp_path / name, build_toml, files, package)
    return make


@pytest.fixture(scope="session")
def factory_cache() -> Path:
    """Toolkits and torch environments for the slow tests: the factory's own cache, so a build
    a user already ran is reused (they are big). FACTORY_TEST_CACHE points elsewhere."""
    path = Path(os.environ["FACTORY_TEST_CACHE"]) if "FACTORY_TEST_CACHE" in os.environ \
        else default_cache_dir()
    path.mkdir(parents=True, exist_ok=True)
    return path
