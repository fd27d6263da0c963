"""Shared helpers: the real CLI in a subprocess or in-process, folder snapshots, kernels written
on the fly, and the tests' own persistent cache of toolkits and torch environments (never the
user's: every factory the tests start is pointed at it)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from factory.cli import main

# The fixtures are kernels: their own tests run against their wheels (factory build --test),
# never in the factory's suite.
collect_ignore_glob = ["fixtures/*"]

# The fixtures several test modules share.
pytest_plugins = ["tests.support.browser", "tests.support.cli", "tests.support.docker",
                  "tests.support.hostile", "tests.support.workflows"]

# Every factory the tests start keeps its objects under one key (a CI secret's stand-in), so
# that builds sharing the tests' cache reuse each other's objects, and nothing is written to
# the user's configuration folder.
os.environ.setdefault("KERNEL_WHEEL_FACTORY_OBJECT_KEY", "the tests' object cache key")

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


@pytest.fixture
def kernel_factory(tmp_path):
    def make(build_toml: str, files: dict[str, str] | None = None, package: str | None = None,
             name: str = "kernel") -> Path:
        return make_kernel(tmp_path / name, build_toml, files, package)
    return make


def tests_cache_dir() -> Path:
    """The tests' cache: FACTORY_TEST_CACHE, else kernel-wheel-factory-tests beside the user's
    cache folder. It persists between runs (toolkits and torch environments are big) and is
    never the cache a user's own builds use."""
    if "FACTORY_TEST_CACHE" in os.environ:
        return Path(os.environ["FACTORY_TEST_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "kernel-wheel-factory-tests"


TEST_CACHE = tests_cache_dir()
# Set before any test runs, so every factory a test starts (in a subprocess or in-process)
# that is not given a cache of its own uses the tests' cache, not the user's.
os.environ["KERNEL_WHEEL_FACTORY_CACHE"] = str(TEST_CACHE)
# Likewise no factory a test starts looks the wheels' names up on PyPI (its answers change);
# the tests of that check give it an index served from the test.
os.environ["KERNEL_WHEEL_FACTORY_NAME_INDEX"] = "off"


@pytest.fixture(scope="session")
def factory_cache() -> Path:
    """Toolkits and torch environments for the slow tests, shared by the whole run."""
    TEST_CACHE.mkdir(parents=True, exist_ok=True)
    return TEST_CACHE


EXAMPLE_WHEEL = re.compile(
    r"img2gray-1\.0\.0\+cu130torch211-cp39-abi3-manylinux_(\d+)_(\d+)_x86_64\.whl")


def cache_env(cache: Path) -> dict[str, str]:
    """The variables that point a factory at the tests' cache (with the tests' object key)."""
    return {"KERNEL_WHEEL_FACTORY_CACHE": str(cache),
            "KERNEL_WHEEL_FACTORY_OBJECT_KEY": os.environ["KERNEL_WHEEL_FACTORY_OBJECT_KEY"]}


def root_label() -> str:
    """The label of the root matrix's one cell, from the torch release matrix.lock pins
    (cu132torch215 for torch 2.15 with CUDA 13.2)."""
    import tomllib

    (torch,) = tomllib.loads((REPO / "matrix.lock").read_text())["torch"]
    return f"cu{torch['cuda'].replace('.', '')}torch{torch['release'].replace('.', '')}"


@pytest.fixture(scope="session")
def example_build(tmp_path_factory, factory_cache):
    """The shipped example built for the tests' torch (2.11 with CUDA 13.0, sm_90), which the
    tests' cache and their torch environments hold; README.md's own line (the newest torch,
    as matrix.lock pins it) is built by test_build.py."""
    folder = tmp_path_factory.mktemp("example")
    out = folder / "index"
    matrix = one_cell_matrix(folder, EXAMPLE).read_text().replace("runner: local\n", "")
    result = run_factory("build", write(folder / "matrix.yaml", matrix), "--out", out,
                         env=cache_env(factory_cache))
    assert result.exit == 0, result.stdout + result.stderr
    return out, result


@pytest.fixture(scope="session")
def example_tested(example_build, tmp_path_factory, factory_cache):
    """A copy of the example's output folder after `factory test matrix.yaml` ran on it."""
    import shutil

    out = shutil.copytree(example_build[0], tmp_path_factory.mktemp("tested") / "index",
                          symlinks=True)
    result = run_factory("test", example_build[0].parent / "matrix.yaml", "--out", out,
                         env=cache_env(factory_cache))
    return out, result


@contextlib.contextmanager
def serving(out: Path, stderr: Any = subprocess.DEVNULL) -> Iterator[str]:
    """`factory serve` on an output folder, on a free port: its URL (ending in /)."""
    process = subprocess.Popen([sys.executable, "-m", "factory", "serve", str(out), "--port",
                                "0"], stdout=subprocess.PIPE, stderr=stderr, text=True)
    try:
        line = process.stdout.readline() if process.stdout else ""
        assert " at http://127.0.0.1:" in line, line
        yield line.split(" at ", 1)[1].split()[0]
    finally:
        process.terminate()
        process.wait()


@contextlib.contextmanager
def static_server(root: Path, log: list[str] | None = None) -> Iterator[str]:
    """The files under `root` served over HTTP on a free port (a stand-in index): its URL,
    ending in /. Each request's path is appended to `log`."""
    class Handler(SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(root), **kwargs)

        def log_message(self, *args: Any) -> None:
            pass

        def log_request(self, *args: Any) -> None:
            if log is not None:
                log.append(self.path)

    with http_server(Handler) as url:
        yield url


@contextlib.contextmanager
def http_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A server of `handler` on a free port, in a thread of this process: its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="session")
def cuobjdump(factory_cache, tmp_path_factory) -> Path:
    """NVIDIA's cuobjdump, from PyPI (the CUDA 13 toolkit's own package)."""
    from uv import find_uv_bin

    target = tmp_path_factory.mktemp("cuobjdump")
    subprocess.run([find_uv_bin(), "pip", "install", "--quiet", "--target", target,
                    "nvidia-cuda-cuobjdump>=13,<14"], check=True,
                   env={**os.environ, "UV_CACHE_DIR": str(factory_cache / "uv")})
    (found,) = target.rglob("bin/cuobjdump")
    return found


def listed_by_cuobjdump(cuobjdump: Path, binary: Path, folder: Path) -> dict[str, int]:
    """sm_90 / compute_90 -> the bytes of that code as cuobjdump extracts it (inflated)."""
    folder.mkdir()
    subprocess.run([cuobjdump, "-xelf", "all", "-xptx", "all", binary], cwd=folder, check=True,
                   capture_output=True)
    found = {}
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


@pytest.fixture(scope="session")
def stable_build(tmp_path_factory, factory_cache):
    """The stable-ABI fixture kernel built for torch 2.11, 2.12 and 2.13: its output folder
    and the build's output."""
    folder = tmp_path_factory.mktemp("stable")
    out = folder / "index"
    result = run_factory("build", stable_matrix(folder), "--out", out,
                         env=cache_env(factory_cache))
    assert result.exit == 0, result.stdout + result.stderr
    return out, result


@pytest.fixture(scope="session")
def example_wheel(example_build) -> Path:
    out, _ = example_build
    wheels = sorted((out / "files").glob("*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="session")
def torch_venv(tmp_path_factory, factory_cache) -> Path:
    """A fresh virtual environment with torch 2.11 (from PyPI) and pytest, made with uv."""
    return new_torch_venv(tmp_path_factory.mktemp("venv") / "torch211", factory_cache)


def new_torch_venv(venv: Path, factory_cache: Path) -> Path:
    from uv import find_uv_bin

    env = {**os.environ, "UV_CACHE_DIR": str(factory_cache / "uv")}
    subprocess.run([find_uv_bin(), "venv", "--quiet", "--seed", "--python", sys.executable, venv],
                   check=True, env=env)
    subprocess.run([find_uv_bin(), "pip", "install", "--quiet", "--python", venv / "bin/python",
                    "torch==2.11.*", "pytest"], check=True, env=env)
    return venv


def venv_python(venv: Path, *args: str, cwd: Path | None = None) -> str:
    completed = subprocess.run([str(venv / "bin" / "python"), *args], capture_output=True,
                               text=True, cwd=cwd)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    return completed.stdout


def pip_install(venv: Path, wheel: Path) -> None:
    venv_python(venv, "-m", "pip", "install", "--quiet", "--no-index", str(wheel))


def read_dist_info(wheel: Path, name: str) -> str:
    with zipfile.ZipFile(wheel) as archive:
        (member,) = [n for n in archive.namelist() if n.endswith(f".dist-info/{name}")]
        return archive.read(member).decode()


def run_example(venv: Path, wheel: Path, tmp_path: Path) -> dict:
    """Install an img2gray wheel into a torch venv and run its op three ways on images of four
    shapes against a reference computed with torch; what the run reports."""
    pip_install(venv, wheel)
    script = write(tmp_path / "check.py", """
        import json
        import torch
        import img2gray

        name = img2gray.add_op_namespace_prefix("img2gray")
        namespace = name.split("::")[0]
        op = getattr(getattr(torch.ops, namespace), "img2gray")
        generator = torch.Generator().manual_seed(1)
        results = []
        for shape in [(1, 1), (3, 5), (480, 640), (1024, 768)]:
            rgb = torch.randint(0, 256, (*shape, 3), dtype=torch.uint8, generator=generator)
            weights = torch.tensor([210, 720, 70], dtype=torch.int32)
            expected = ((rgb.to(torch.int32) * weights).sum(-1) + 500).div(
                1000, rounding_mode="floor")
            expected = expected.to(torch.uint8)
            results.append(torch.equal(op(rgb), expected)
                           and torch.equal(img2gray.img2gray(rgb), expected)
                           and torch.equal(img2gray.ops.img2gray(rgb), expected))
        print(json.dumps({"namespace": namespace, "results": results, "torch": torch.__version__,
                          "location": img2gray.__file__}))
    """)
    return json.loads(venv_python(venv, str(script), cwd=tmp_path).splitlines()[-1])


# Where the suite's time goes, per file (setup, call and teardown; a session fixture counts
# where it is first used): the slowest files after the run, and all of them in
# test-artifacts/test-times.json, to compare runs; each test's setup and call in
# test-artifacts/test-times-by-test.json, to see where a file's time goes.
_FILE_SECONDS: dict[str, float] = {}
_TEST_SECONDS: dict[str, dict[str, float]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = report.nodeid.split("::", 1)[0]
    _FILE_SECONDS[path] = _FILE_SECONDS.get(path, 0.0) + report.duration
    _TEST_SECONDS.setdefault(report.nodeid, {})[report.when] = round(report.duration, 1)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _FILE_SECONDS:
        return
    ranked = sorted(_FILE_SECONDS.items(), key=lambda item: -item[1])
    terminalreporter.write_sep("-", "slowest test files")
    for path, seconds in ranked[:10]:
        terminalreporter.write_line(f"{seconds:8.1f} s  {path}")
    folder = REPO / "test-artifacts"
    folder.mkdir(exist_ok=True)
    (folder / "test-times.json").write_text(json.dumps(
        {path: round(seconds, 1) for path, seconds in ranked}, indent=1) + "\n")
    (folder / "test-times-by-test.json").write_text(json.dumps(dict(sorted(
        _TEST_SECONDS.items(), key=lambda item: -sum(item[1].values()))), indent=1) + "\n")
