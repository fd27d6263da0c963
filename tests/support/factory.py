"""The factory run as a user runs it (a subprocess, or in-process for bad input), the
kernels and matrices it reads written on the fly, and the tests' own cache."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from factory.cli import main
from factory.sources.tree import tree_digest

REPO = Path(__file__).resolve().parents[2]


FIXTURES = REPO / "tests" / "fixtures"


EXAMPLE = REPO / "examples" / "img2gray"


@dataclass
class Result:
    exit: int
    stdout: str
    stderr: str


# The longest a `factory` command may run in a test: past it the command and everything it
# started are killed and the test fails, rather than the whole run stopping at CI's limit.
RUN_LIMIT = 40 * 60


def run_factory(*args: str | Path, cwd: Path | None = None,
                env: dict[str, str] | None = None, limit: float = RUN_LIMIT) -> Result:
    """The installed `factory` command, as a user runs it, in a session of its own: one that
    runs past `limit` seconds is killed with all it started, and the test fails saying so."""
    argv = [sys.executable, "-m", "factory", *[str(a) for a in args]]
    with subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, start_new_session=True,
                          env={**os.environ, "COLUMNS": "200", **(env or {})}) as process:
        try:
            stdout, stderr = process.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            pytest.fail(f"factory {' '.join(argv[3:])} ran past {limit:.0f} s; it said:\n"
                        f"{stderr[-4000:]}")
    return Result(process.returncode, stdout, stderr)


def factory_main(*args: str | Path, capsys: pytest.CaptureFixture[str]) -> Result:
    """The `factory` command run in this process (for bad-input cases: no interpreter start)."""
    status = main([str(a) for a in args])
    captured = capsys.readouterr()
    return Result(status, captured.out, captured.err)


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


def tests_cache_dir() -> Path:
    """The tests' cache: FACTORY_TEST_CACHE, else kernel-wheel-factory-tests beside the user's
    cache folder. It persists between runs (toolkits and torch environments are big) and is
    never the cache a user's own builds use."""
    if "FACTORY_TEST_CACHE" in os.environ:
        return Path(os.environ["FACTORY_TEST_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "kernel-wheel-factory-tests"


TEST_CACHE = tests_cache_dir()


def kept_project(name: str, make: Callable[[Path], object]) -> Path:
    """The project `make` writes into the folder it is given (named `name`), kept in the
    tests' cache under a folder named by it and its tree's digest (the one that names a local
    project's revision). The object cache tells a local project by its folder: the same
    project at the same path is served what its earlier builds compiled, in this run or an
    earlier one, while a project made anew in a test's own folder compiles every unit."""
    kept = TEST_CACHE / "projects"
    kept.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=kept))
    scratch.chmod(0o755)
    try:
        make(scratch / name)
        folder = kept / f"{name}-{tree_digest(scratch / name)[:16]}"
        if not folder.exists():
            try:
                scratch.rename(folder)
            except OSError:  # made at the same moment by another worker: the same files
                if not (folder / name).is_dir():
                    raise
        return folder / name
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


EXAMPLE_WHEEL = re.compile(
    r"img2gray-1\.0\.0\+cu130torch211-cp39-abi3-manylinux_(\d+)_(\d+)_x86_64\.whl")


def cache_env(cache: Path) -> dict[str, str]:
    """The variables that point a factory at the tests' cache (with the tests' object key) and
    at the run's build folder, whose paths the cached objects hold."""
    return {"KERNEL_WHEEL_FACTORY_CACHE": str(cache),
            "KERNEL_WHEEL_FACTORY_OBJECT_KEY": os.environ["KERNEL_WHEEL_FACTORY_OBJECT_KEY"],
            "KERNEL_WHEEL_FACTORY_BUILD_ROOT": os.environ["KERNEL_WHEEL_FACTORY_BUILD_ROOT"]}


def root_label() -> str:
    """The label of the root matrix's one cell, from the torch release matrix.lock pins
    (cu132torch215 for torch 2.15 with CUDA 13.2)."""
    import tomllib

    (torch,) = tomllib.loads((REPO / "matrix.lock").read_text())["torch"]
    return f"cu{torch['cuda'].replace('.', '')}torch{torch['release'].replace('.', '')}"


def listed_by_cuobjdump(cuobjdump: Path, binary: Path, folder: Path) -> dict[str, int]:
    """sm_90 / compute_90 -> the bytes of that code as cuobjdump extracts it (inflated)."""
    folder.mkdir()
    subprocess.run([cuobjdump, "-xelf", "all", "-xptx", "all", binary], cwd=folder, check=True,
                   capture_output=True)
    found: dict[str, int] = {}
    for path in folder.iterdir():  # <name>.<n>.sm_90.cubin, <name>.<n>.sm_90.ptx
        arch = path.name.split(".")[-2].removeprefix("sm_")
        code = f"sm_{arch}" if path.suffix == ".cubin" else f"compute_{arch}"
        found[code] = found.get(code, 0) + path.stat().st_size
    return found


def one_cell_matrix(folder: Path, kernel: Path | str, entry: str = "", top: str = "") -> Path:
    """folder/matrix.yaml: one kernel (with `entry`'s extra keys, e.g. "compress: none") for
    torch 2.11 with CUDA 13.0, sm_90, built on this machine (with `top`'s extra keys)."""
    lines = [f"kernels:\n  - path: {kernel}\n    version: 1.0.0",
             *(f"    {line}" for line in entry.splitlines()),
             'torch: ["2.11"]\ncuda:\n  "13.0":\n    sms: ["9.0"]\nrunner: local', top]
    path = folder / "matrix.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def example_built_and_tested(folder: Path, top: str, cache: Path,
                             kernel: Path = EXAMPLE) -> tuple[Path, Result]:
    """The example (or a copy of it at `kernel`) built with `--test` from a one-cell matrix
    with `top`'s extra keys (e.g. "cpu: true"): its output folder, and what the build said."""
    matrix = one_cell_matrix(folder, kernel, top=top)
    out = folder / "out"
    done = run_factory("build", matrix, "--out", out, "--test", env=cache_env(cache))
    assert done.exit == 0, done.stdout + done.stderr
    return out, done


STABLE_KERNEL = FIXTURES / "stable-kernel"


def stable_matrix(folder: Path, kernel: Path = STABLE_KERNEL, extra: str = "") -> Path:
    """A matrix of the stable-ABI fixture for torch 2.11, 2.12 and 2.13 (and `extra`) with
    CUDA 13.0, for sm_90."""
    return write(folder / "matrix.yaml", f"""
        kernels:
          - path: {kernel}
            version: 1.0.0
        torch: ["2.11", "2.12", "2.13"{extra}]
        cuda:
          "13.0":
            sms: ["9.0"]
        runner: local
    """)
