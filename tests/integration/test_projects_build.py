"""The shipped PEP 517 example (examples/relu-scale, a setup.py CUDAExtension with a pybind11
module) built in builder containers for two CPythons, installed from its cell's index into
fresh environments of each and tested with its own tests; built again from the object cache;
its wheels held to the gates; a project that downloads during its build stopped by the
missing network."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from factory.cells.runners.docker.image import host_certificates
from factory.wheel.gates import Expectation, check_wheel
from factory.wheel.inspect import inspect_wheel

from ..support.checks import present
from ..support.docker import BASE
from ..support.factory import REPO, Result, cache_env, run_factory, write
from ..support.installs import read_dist_info
from ..support.system import debian_package

pytestmark = [pytest.mark.slow, pytest.mark.network]

PROJECT = REPO / "examples" / "relu-scale"
PYTHONS = ("3.11", "3.13")  # the CPythons of the offline base (Debian's sources have no 3.12)
LABEL = "cu130torch211"


def project_matrix(folder: Path, project: Path, pythons: tuple[str, ...] = PYTHONS,
                   env: str = "") -> Path:
    return write(folder / "matrix.yaml", f"""
        kernels:
          - path: {project}
            {env}
        torch: ["2.11"]
        cuda: {{"13.0": {{sms: ["9.0"]}}}}
        python: {json.dumps(list(pythons))}
        runner: docker
        docker: {{base: {BASE}}}
    """)


@pytest.fixture(scope="module")
def project_build(tmp_path_factory: pytest.TempPathFactory, factory_cache: Path,
                  bullseye_base: str) -> tuple[Path, Result]:
    folder = tmp_path_factory.mktemp("relu-scale")
    project_matrix(folder, PROJECT)
    result = run_factory("build", "matrix.yaml", "--out", folder / "index", cwd=folder,
                         env=cache_env(factory_cache))
    assert result.exit == 0, result.stdout + result.stderr
    return folder / "index", result


def wheel_of(index: Path, python: str) -> Path:
    tag = "cp" + python.replace(".", "")
    (wheel,) = (index / "files").glob(f"relu_scale-1.0.0+{LABEL}-{tag}-{tag}-manylinux_*.whl")
    return wheel


def test_one_labelled_wheel_per_cpython(project_build: tuple[Path, Result]) -> None:
    index, result = project_build
    assert sorted(path.name for path in (index / "files").glob("*.whl")) == [
        wheel_of(index, python).name for python in PYTHONS]
    for python in PYTHONS:
        assert re.search(rf"relu-scale/{LABEL}/x86_64/cp{python.replace('.', '')} +│ built",
                         result.stdout), result.stdout
        wheel = wheel_of(index, python)
        metadata = read_dist_info(wheel, "METADATA")
        assert "Version: 1.0.0+cu130torch211\n" in metadata
        assert re.findall(r"^Requires-Dist: .*$", metadata, re.M) == [
            "Requires-Dist: torch==2.11.*"]
        provenance = json.loads(read_dist_info(wheel, "provenance.json"))
        assert provenance["cell"]["python"] == python and provenance["cell"]["per_python"]
        tag = python.replace(".", "")
        assert provenance["gpu_code_found"] == {
            f"relu_scale/_C.cpython-{tag}-x86_64-linux-gnu.so": ["compute_90", "sm_90"]}
    page = (index / LABEL / "simple" / "relu-scale" / "index.html").read_text()
    for python in PYTHONS:
        assert wheel_of(index, python).name.replace("+", "%2B") in page


def test_a_second_build_in_containers_takes_every_unit_from_the_object_cache(
        project_build: tuple[Path, Result], factory_cache: Path, tmp_path: Path) -> None:
    """The build runs in a container of its own; its compiler wrappers reach the object cache's
    broker, served from outside, through the socket's mounted folder: nothing is compiled
    again, and the wheels are the same bytes."""
    index, first = project_build
    # the first build compiled what an earlier run of the suite had not left in the cache
    counted = re.search(r"units: (\d+) compiled, (\d+) from the object cache", first.stdout)
    assert counted and int(counted[1]) + int(counted[2]) == 4, first.stdout
    project_matrix(tmp_path, PROJECT)
    again = run_factory("build", "matrix.yaml", "--out", tmp_path / "index", cwd=tmp_path,
                        env=cache_env(factory_cache))
    assert again.exit == 0, again.stdout + again.stderr
    assert "units: 0 compiled, 4 from the object cache" in again.stdout, again.stdout
    for python in PYTHONS:
        assert wheel_of(tmp_path / "index", python).read_bytes() == \
            wheel_of(index, python).read_bytes()
    (log, *_) = sorted((tmp_path / "index" / "logs").glob("*.log"))
    assert "$WORK/src/csrc/relu_scale_cuda.cu: from the object cache" in log.read_text()


def test_each_wheel_installs_from_its_cell_index_and_passes_the_projects_tests(
        project_build: tuple[Path, Result], factory_cache: Path, tmp_path: Path) -> None:
    """In a container of the base, each CPython gets a fresh environment, torch 2.11 from
    PyPI and relu-scale from the served cell index (uv: the cell index is asked first)."""
    index, _ = project_build
    from uv import find_uv_bin
    certificates = tmp_path / "ca-certificates.crt"  # the host's, a TLS proxy's included
    certificates.write_bytes(host_certificates())

    with subprocess.Popen([sys.executable, "-m", "factory", "serve", str(index), "--port", "0"],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) as server:
        try:
            line = present(server.stdout).readline()
            url = line.split(" at ", 1)[1].split()[0]
            for python in PYTHONS:
                tag = "cp" + python.replace(".", "")
                script = (
                    f"uv venv --quiet --python /opt/python/{tag}-{tag}/bin/python /tmp/env && "
                    "uv pip install --quiet --python /tmp/env/bin/python torch==2.11.* pytest "
                    f"relu-scale --extra-index-url {url}{LABEL}/simple && "
                    "/tmp/env/bin/python -c 'import relu_scale, sys; "
                    "print(relu_scale.__file__)' && cp -r /project-tests /tmp/tests && "
                    "/tmp/env/bin/python -m pytest -q -p no:cacheprovider /tmp/tests")
                done = subprocess.run(
                    ["docker", "run", "--rm", "--network", "host",
                     "--mount", f"type=bind,source={find_uv_bin()},target=/usr/local/bin/uv,"
                                "readonly",
                     "--mount", f"type=bind,source={factory_cache / 'uv'},target=/uv-cache",
                     "--mount", f"type=bind,source={PROJECT / 'tests'},target=/project-tests,"
                                "readonly",
                     "--mount", f"type=bind,source={certificates},target=/host-ca.crt,readonly",
                     "--env", "SSL_CERT_FILE=/host-ca.crt",
                     "--env", "UV_CACHE_DIR=/uv-cache", "--env", "UV_LINK_MODE=copy",
                     BASE, "sh", "-c", script], capture_output=True, text=True)
                assert done.returncode == 0, done.stdout + done.stderr
                assert f"/tmp/env/lib/python{python}/site-packages/relu_scale/" in done.stdout
                assert re.search(r"^6 passed, 1 skipped", done.stdout, re.M), done.stdout
        finally:
            server.terminate()


def test_the_import_guard_refuses_another_torch_before_the_extension_loads(
        project_build: tuple[Path, Result], tmp_path: Path) -> None:
    """The guard is imported first by the package's __init__.py: with a torch 2.10 (a stand-in
    module: the guard only reads its versions) the import stops with the cell's index named,
    before the extension, which would fail with an undefined symbol, is loaded."""
    index, _ = project_build
    with zipfile.ZipFile(wheel_of(index, "3.11")) as archive:
        archive.extractall(tmp_path / "site")
        init = archive.read("relu_scale/__init__.py").decode()
    assert init.splitlines()[1] == \
        "from . import _kernel_wheel_factory_guard  # noqa: F401  (kernel-wheel-factory)"
    write(tmp_path / "site" / "torch" / "__init__.py", """
        __version__ = "2.10.0+cu130"
        class version:
            cuda = "13.0"
    """)
    done = subprocess.run([sys.executable, "-c", "import relu_scale"], cwd=tmp_path,
                          env={"PYTHONPATH": str(tmp_path / "site")}, capture_output=True,
                          text=True)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "ImportError: relu-scale 1.0.0+cu130torch211 was built for torch 2.11 with CUDA 13, "
        "but this environment has torch 2.10.0+cu130 with CUDA 13.0. Install the relu-scale "
        "wheel built for it, from the 'cu130torch210' index (.../cu130torch210/simple), or "
        "install torch 2.11 with CUDA 13.")


def doctored(wheel: Path, target: Path) -> Path:
    """The wheel with a library named like torch's libc10 inside (a copy of its own extension
    will do) and its torch pin taken out."""
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(target, "w") as out:
        extension = next(name for name in source.namelist() if name.endswith(".so"))
        for info in source.infolist():
            data = source.read(info)
            if info.filename.endswith(".dist-info/METADATA"):
                data = data.replace(b"Requires-Dist: torch==2.11.*\n", b"")
            out.writestr(info, data)
        out.writestr("relu_scale.libs/libc10-0a1b2c3d.so", source.read(extension))
    return target


def test_the_gates_hold_such_wheels_and_catch_a_doctored_one(project_build: tuple[Path, Result],
        tmp_path: Path) -> None:
    index, _ = project_build
    wheel = wheel_of(index, "3.11")
    expect = Expectation("relu-scale", f"1.0.0+{LABEL}", "==2.11.*", 13, frozenset({"sm_90"}),
                         "x86_64", gpu_covers=True)
    report = inspect_wheel(wheel)
    assert not report.is_abi3 and all(tag.startswith("cp311-cp311-manylinux_")
                                      for tag in report.tags), report.tags
    assert check_wheel(report, expect) == []
    problems = check_wheel(inspect_wheel(doctored(wheel, tmp_path / wheel.name)), expect)
    assert "the torch requirement is missing, the cell's torch is torch==2.11.*" in problems
    assert any(problem.startswith("libraries: the wheel bundles relu_scale.libs/libc10-0a1b2c3d"
                                  ".so") for problem in problems), problems
    missing = check_wheel(report, replace(expect, gpu_code=frozenset({"sm_90", "sm_100"})))
    assert len(missing) == 1 and "has no SASS for sm_100" in missing[0], missing


def test_a_build_that_downloads_fails_for_want_of_a_network(tmp_path: Path, factory_cache: Path,
                                                             bullseye_base: str) -> None:
    """Like real setup.py files that fetch a prebuilt wheel unless told to build: the build
    container has no network, and the message says what to set; env: reaches the build."""
    project = shutil.copytree(PROJECT, tmp_path / "downloads", ignore=shutil.ignore_patterns(
        "tests"))
    setup = project / "setup.py"
    setup.write_text(
        "import os, urllib.request\n"
        "url = os.environ['RELU_SCALE_WHEELS'] + '/relu_scale-1.0.0-cp311-cp311-linux.whl'\n"
        "print('Guessing wheel URL:', url)\n"
        "urllib.request.urlretrieve(url, 'prebuilt.whl')\n" + setup.read_text())
    project_matrix(tmp_path, project, ("3.11",),
                   env='env: {RELU_SCALE_WHEELS: "https://github.com/example/releases"}')
    result = run_factory("build", "matrix.yaml", "--out", tmp_path / "index", cwd=tmp_path,
                         env=cache_env(factory_cache))
    assert result.exit == 1
    assert "the project's build tried to reach the network, and builds have no network" in \
        result.stdout, result.stdout
    assert "under the kernel's env: in the matrix" in result.stdout
    log = (tmp_path / "index" / "logs" / f"relu-scale-{LABEL}-x86_64-cp311.log").read_text()
    assert "Guessing wheel URL: https://github.com/example/releases/relu_scale-1.0.0" in log
    assert "Temporary failure in name resolution" in log or "Network is unreachable" in log
    assert list((tmp_path / "index" / "files").glob("*.whl")) == []


def test_in_a_builder_container_the_import_gate_has_the_wheels_own_requirements(
        tmp_path: Path, factory_cache: Path, bullseye_base: str) -> None:
    """A package that imports a project it requires (six): the import gate's environment gets
    it from the prepare container while the network is on, and the gate passes with the
    network off."""
    project = shutil.copytree(PROJECT, tmp_path / "needs-six", ignore=shutil.ignore_patterns(
        "tests"))
    package = project / "relu_scale" / "__init__.py"
    package.write_text(package.read_text().replace("import torch\n", "import six\nimport torch\n",
                                                   1))
    setup = project / "setup.py"
    setup.write_text(setup.read_text().replace('install_requires=["torch"]',
                                               'install_requires=["torch", "six"]'))
    project_matrix(tmp_path, project, ("3.11",))
    result = run_factory("build", "matrix.yaml", "--out", tmp_path / "index", cwd=tmp_path,
                         env=cache_env(factory_cache))
    assert result.exit == 0, result.stdout + result.stderr
    log = (tmp_path / "index" / "logs" / f"relu-scale-{LABEL}-x86_64-cp311.log").read_text()
    assert "the wheel's requirements beside torch 2.11 for its import: six\n" in log, log
    assert "import relu_scale" in log and "gate failed" not in log
    metadata = read_dist_info(wheel_of(tmp_path / "index", "3.11"), "METADATA")
    assert "Requires-Dist: six\n" in metadata


HOSTILE_PROLOGUE = """\
import os as _os, pathlib as _pathlib
print("hostile: planted", _os.environ.get("KWF_PLANTED_TOKEN", "absent"))
for _target in {targets!r}:
    try:
        _pathlib.Path(_target).write_text("hostile")
        print("hostile: wrote", _target)
    except OSError as _exc:
        print("hostile: blocked", _target, _exc.strerror)
"""


SECRETS = {"KWF_PLANTED_TOKEN": "planted-s3cret-value", "TWINE_PASSWORD": "twine-s3cret",
           "HF_TOKEN": "hf_s3cretvalue"}


@pytest.fixture(scope="module")
def hostile_build(tmp_path_factory: pytest.TempPathFactory,
                  factory_cache: Path) -> tuple[Path, Path, Any, Result]:
    """The example with a setup.py that once printed TWINE_PASSWORD into its log, wrote into
    the home folder and the factory's cache and dropped a wheel into files/, built on this
    machine (the local runner, under bubblewrap) with secrets in the factory's environment."""
    debian_package("bubblewrap", "bwrap")
    folder = tmp_path_factory.mktemp("hostile-local")
    project = shutil.copytree(PROJECT, folder / "hostile", ignore=shutil.ignore_patterns(
        "tests"))
    out = folder / "out"
    targets = [str(REPO / ".kernel-wheel-factory-hostile"),
               str(factory_cache / "hostile-was-here"),
               str(out / "files" / "evil-6.6.6+cu130torch211-py3-none-any.whl")]
    setup = project / "setup.py"
    setup.write_text(HOSTILE_PROLOGUE.format(targets=targets) + setup.read_text())
    write(folder / "matrix.yaml", f"""
        kernels: [{{path: {project}}}]
        torch: ["2.11"]
        cuda: {{"13.0": {{sms: ["9.0"]}}}}
        python: ["{sys.version_info.major}.{sys.version_info.minor}"]
        runner: local
    """)
    result = run_factory("build", "matrix.yaml", "--out", out, cwd=folder,
                         env={**cache_env(factory_cache), **SECRETS})
    assert result.exit == 0, result.stdout + result.stderr
    return project, out, targets, result


def test_a_hostile_setup_py_on_this_machine_reads_no_secret_and_writes_nothing_outside(
        hostile_build: tuple[Path, Path, Any, Result]) -> None:
    """It runs confined, sees an allow-listed environment, and only its own wheel is
    published."""
    _, out, targets, result = hostile_build
    (log,) = (out / "logs").glob("relu-scale-*.log")
    text = log.read_text()
    assert "hostile: planted absent" in text
    for target in targets:
        assert not Path(target).exists(), target
    assert f"hostile: blocked {targets[0]} Read-only file system" in text
    assert [wheel.name.split("-")[0] for wheel in (out / "files").glob("*.whl")] == \
        ["relu_scale"]
    published = b"".join(path.read_bytes() for path in out.rglob("*") if path.is_file())
    for wheel in out.rglob("*.whl"):  # its members are compressed: read them as they unpack
        with zipfile.ZipFile(wheel) as archive:
            published += b"".join(archive.read(name) for name in archive.namelist())
    for value in SECRETS.values():
        assert value not in result.stdout + result.stderr + text
        assert value.encode() not in published


def test_a_local_build_is_reproduced_byte_for_byte_by_verify(
        hostile_build: tuple[Path, Path, Any, Result], factory_cache: Path, tmp_path: Path) -> None:
    """The wheel built on this machine above, rebuilt from its provenance by `factory verify`
    (in another folder, by the same confined build step, the hostile setup.py run again):
    the same bytes."""
    project, out, targets, _ = hostile_build
    (wheel,) = (out / "files").glob("*.whl")
    verified = run_factory("verify", wheel, "--source", project, cwd=tmp_path,
                           env=cache_env(factory_cache))
    assert verified.exit == 0, verified.stdout + verified.stderr
    assert "verified: the rebuilt wheel is byte-identical" in verified.stdout
    assert not any(Path(target).exists() for target in targets)


IN_CONTAINER = """\
import pathlib as _pathlib
_src = _pathlib.Path("/work/src")
print("hostile: objects", "mounted" if _pathlib.Path("/objects").exists() else "absent")
print("hostile: kernels", sorted(_p.name for _p in _src.iterdir()) if _src.is_dir() else [])
_seen = set()
for _environ in _pathlib.Path("/proc").glob("*/environ"):
    try:
        _data = _environ.read_bytes()
    except OSError:
        continue
    _seen |= {{_name for _name in {names!r} if (_name + "=").encode() in _data}}
print("hostile: secrets seen", sorted(_seen))
"""


def test_in_a_builder_container_a_hostile_setup_py_has_a_container_of_its_own(
        tmp_path: Path, factory_cache: Path, bullseye_base: str) -> None:
    """Built with a kernel-builder kernel of the same builder image, which shares a build
    container: the setup.py runs in one of its own, without the object cache, without the
    other kernel's files, and with none of the factory's secrets in any process it can
    see; it is removed when the build ends."""
    project = shutil.copytree(PROJECT, tmp_path / "hostile", ignore=shutil.ignore_patterns(
        "tests"))
    setup = project / "setup.py"
    setup.write_text(IN_CONTAINER.format(names=sorted(SECRETS)) + setup.read_text())
    write(tmp_path / "matrix.yaml", f"""
        kernels:
          - path: {project}
          - {{path: {REPO / "examples" / "img2gray"}, version: 1.0.0}}
        torch: ["2.11"]
        cuda: {{"13.0": {{sms: ["9.0"]}}}}
        python: ["3.11"]
        runner: docker
        docker: {{base: {BASE}}}
    """)
    result = run_factory("build", "matrix.yaml", "--out", tmp_path / "index", cwd=tmp_path,
                         env={**cache_env(factory_cache), **SECRETS})
    assert result.exit == 0, result.stdout + result.stderr
    log = (tmp_path / "index" / "logs" / f"relu-scale-{LABEL}-x86_64-cp311.log").read_text()
    assert "hostile: objects absent" in log, log[-3000:]
    assert "hostile: kernels ['relu-scale']" in log, log[-3000:]
    assert "hostile: secrets seen []" in log, log[-3000:]
    (own,) = re.findall(r"the kernel's code runs in a container of its own, (\S+-build-\d+):",
                        log)
    listing = subprocess.run(["docker", "ps", "--all", "--format", "{{.Names}}"],
                             capture_output=True, text=True, check=True).stdout.split()
    assert own not in listing
    assert sorted(wheel.name.split("-")[0] for wheel in (tmp_path / "index" / "files").glob(
        "*.whl")) == ["img2gray", "relu_scale"]
