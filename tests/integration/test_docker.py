"""The docker runner, for real: builder images on the offline bullseye base, builds in
containers with no network as a non-root user, and nothing left behind after a failure or
Ctrl-C."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from factory.cells.runners.docker.image import slug
from factory.sources.tree import tree_digest

from ..support.checks import present
from ..support.docker import BASE
from ..support.factory import EXAMPLE, REPO, Result, cache_env, run_factory, snapshot, write
from ..support.installs import new_torch_venv, read_dist_info, run_example
from ..support.system import made_once

pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.root, pytest.mark.network]

OURS = "label=kernel-wheel-factory.owner"




def our_containers() -> list[str]:
    """The factory's containers this test's own factories left: those of a factory this worker
    started (alive, or gone without removing them), not those of a build another worker's test
    is running at the same time."""
    listing = subprocess.run(["docker", "ps", "--all", "--filter", OURS, "--format",
                              '{{.Names}} {{.Label "kernel-wheel-factory.owner"}}'],
                             capture_output=True, text=True, check=True)
    found = []
    for line in listing.stdout.splitlines():
        name, _, owner = line.partition(" ")
        pid = owner.rpartition(":")[2]
        if not pid.isdigit() or not Path(f"/proc/{pid}").exists() or _started_here(int(pid)):
            found.append(name)
    return found


def _started_here(pid: int) -> bool:
    """Whether a process descends from this one (its parents, read from /proc)."""
    while pid > 1:
        if pid == os.getpid():
            return True
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat.rpartition(")")[2].split()[1])
    return False


def docker_matrix(folder: Path, kernel: Path) -> Path:
    return write(folder / "matrix.yaml", f"""
        kernels:
          - {{path: {kernel}, version: 1.0.0}}
        torch: ["2.11"]
        cuda:
          "13.0":
            sms: ["9.0"]
        runner: docker
        docker:
          base: {BASE}
    """)


def hostile_kernel(folder: Path, script: str) -> Path:
    """The example, with a build step of its own: gcc's -wrapper runs `script` (sh, no commas)
    before each compiler pass of the torch bindings."""
    kernel = shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("tests"))
    toml = kernel / "build.toml"
    flags = json.dumps(["-wrapper", f"/bin/sh,-c,{script}"])
    toml.write_text(toml.read_text().replace(
        '[torch]\n', f'[torch]\ncxx-flags = {flags}\n', 1))
    return kernel


@pytest.fixture(scope="session")
def docker_build(tmp_path_factory: pytest.TempPathFactory, factory_cache: Path,
                 bullseye_base: str) -> tuple[Result, Path]:
    folder = tmp_path_factory.mktemp("docker")
    docker_matrix(folder, EXAMPLE)
    result = run_factory("build", "matrix.yaml", "--out", folder / "index", cwd=folder,
                         env=cache_env(factory_cache))
    assert result.exit == 0, result.stdout + result.stderr
    (wheel,) = (folder / "index" / "files").glob("*.whl")
    return result, wheel


def test_container_build_gives_a_wheel_for_the_bases_glibc(
        docker_build: tuple[Result, Path]) -> None:
    result, wheel = docker_build
    assert re.search(r"runner: docker \(docker \S+ answers", result.stdout), result.stdout
    tag = re.fullmatch(r"img2gray-1\.0\.0\+cu130torch211-cp39-abi3-manylinux_(\d+)_(\d+)_x86_64"
                       r"\.whl", wheel.name)
    assert tag, wheel.name
    # Built on glibc 2.31, the wheel needs no newer glibc; auditwheel tags it with the oldest
    # policy its symbols allow (the host build of the same cell needs 2.34).
    assert (int(tag[1]), int(tag[2])) <= (2, 31)
    report = json.loads(run_factory("inspect", "--json", wheel).stdout)
    (so,) = report["wheels"][0]["shared_objects"]
    assert so["manylinux"] == f"manylinux_{tag[1]}_{tag[2]}"
    assert report["wheels"][0]["problems"] == []
    provenance = json.loads(read_dist_info(wheel, "provenance.json"))
    assert provenance["build"]["builder"].startswith(
        "kernel-wheel-factory/builder-cu13.0-x86_64:")
    assert provenance["cell"]["cuda_home"] == "/usr/local/cuda"
    # bullseye's compiler and Python, not the host's
    assert provenance["toolchain"]["cxx"] == "g++ 10.2.1"
    assert provenance["toolchain"]["python"] == "3.11.2"
    assert provenance["source"]["tree_sha256"] == tree_digest(EXAMPLE)
    with zipfile.ZipFile(wheel) as archive:
        assert any(name.endswith(".abi3.so") for name in archive.namelist())
    assert our_containers() == []


def test_container_wheel_installs_and_runs(docker_build: tuple[Result, Path], tmp_path: Path,
                                           factory_cache: Path) -> None:
    _, wheel = docker_build
    venv = new_torch_venv(tmp_path / "venv", factory_cache)
    report = run_example(venv, wheel, tmp_path)
    assert report["results"] == [True] * 4
    assert report["torch"] == "2.11.0+cu130"
    assert str(venv) in report["location"]


def test_a_container_cell_is_imported_and_tested_in_its_builder_image(
        docker_build: tuple[Result, Path], factory_cache: Path) -> None:
    """The import gate ran in the build container (with the image's CPython and torch), and
    `factory test` runs the kernel's tests in the builder image too."""
    _, wheel = docker_build
    folder = wheel.parent.parent.parent
    log = (folder / "index/logs/img2gray-cu130torch211-x86_64.log").read_text()
    assert re.search(r"loading \S+\.whl with /cache/docker/\S+/bin/python", log), log[-3000:]
    assert "imported img2gray with torch 2.11.0+cu130: 1 op(s), 1 with a fake" in log
    wheelhouse = folder / "wheelhouse"  # copied into the container the tests run in
    wheelhouse.mkdir(exist_ok=True)
    with zipfile.ZipFile(wheelhouse / "kwf_unused-1.0-py3-none-any.whl", "w") as archive:
        archive.writestr("kwf_unused-1.0.dist-info/METADATA",
                         "Metadata-Version: 2.1\nName: kwf-unused\nVersion: 1.0\n")
    tested = run_factory("test", "matrix.yaml", "--out", folder / "index", "--wheelhouse",
                         wheelhouse, cwd=folder, env=cache_env(factory_cache))
    assert tested.exit == 0, tested.stdout + tested.stderr
    assert "8 passed, 0 failed, 6 skipped with no GPU" in tested.stdout, tested.stdout
    log = (folder / "index/logs/img2gray-cu130torch211-x86_64.tests.log").read_text()
    assert "platform linux -- Python 3.11.2" in log  # bullseye's CPython: in the image
    assert "--find-links=/tmp/kernel-wheel-factory-tests/wheelhouse-0" in log, log[-3000:]
    assert our_containers() == []


def test_unchanged_container_cell_is_not_rebuilt(docker_build: tuple[Result, Path],
                                                 factory_cache: Path) -> None:
    _, wheel = docker_build
    folder = wheel.parent.parent.parent
    again = run_factory("build", "matrix.yaml", "--out", folder / "index", cwd=folder,
                        env=cache_env(factory_cache))
    assert again.exit == 0 and "Nothing to rebuild" in again.stdout, again.stdout
    assert our_containers() == []


def test_a_container_build_takes_its_objects_from_the_cache(docker_build: tuple[Result, Path],
                                                            factory_cache: Path) -> None:
    """The builder container keeps its objects in the object cache's part of its base (mounted
    read-write for the build user): another build of the cell into another folder compiles
    nothing and gives the same bytes."""
    _, wheel = docker_build
    folder = wheel.parent.parent.parent
    again = run_factory("build", "matrix.yaml", "--out", folder / "again", cwd=folder,
                        env=cache_env(factory_cache))
    assert again.exit == 0, again.stdout + again.stderr
    assert "units: 0 compiled, 3 from the object cache" in again.stdout, again.stdout
    (log,) = (folder / "again" / "logs").glob("*.log")
    assert "compiling 0 of 3 unit(s), 3 from the object cache" in log.read_text()
    (rebuilt,) = (folder / "again" / "files").glob("*.whl")
    assert rebuilt.read_bytes() == wheel.read_bytes()
    parts = list((factory_cache / "objects" / "docker").glob("*/objects/*/*.o"))
    assert len(parts) >= 3
    assert our_containers() == []


def test_a_build_that_downloads_fails_clearly(tmp_path: Path, factory_cache: Path,
                                              bullseye_base: str) -> None:
    kernel = hostile_kernel(
        tmp_path / "fetching", 'curl -fsS --max-time 20 https://pypi.org/simple/ -o /dev/null '
                               '&& exec "$0" "$@"')
    docker_matrix(tmp_path, kernel)
    result = run_factory("build", "matrix.yaml", cwd=tmp_path, env=cache_env(factory_cache))
    assert result.exit == 1, result.stdout
    assert "the docker runner builds with the network off" in result.stdout
    log = (tmp_path / "index" / "logs" / "img2gray-cu130torch211-x86_64.log").read_text()
    assert "Could not resolve host: pypi.org" in log
    assert list((tmp_path / "index" / "files").iterdir()) == []
    assert our_containers() == []


def test_a_build_cannot_write_outside_its_build_folder(tmp_path: Path, factory_cache: Path,
                                                       bullseye_base: str) -> None:
    out = tmp_path / "out"
    targets = [tmp_path / "kernel" / "ESCAPED", out / "ESCAPED", "/work/src/img2gray/ESCAPED"]
    script = "; ".join(f't={target}; touch "$t" && echo "wrote $t" || echo "refused $t"'
                       for target in targets) + '; echo "uid $(id -u)"; exit 1'
    kernel = hostile_kernel(tmp_path / "kernel", script)
    before = snapshot(kernel)
    docker_matrix(tmp_path, kernel)
    result = run_factory("build", "matrix.yaml", "--out", out, cwd=tmp_path,
                         env=cache_env(factory_cache))
    assert result.exit == 1, result.stdout
    log = (out / "logs" / "img2gray-cu130torch211-x86_64.log").read_text()
    assert re.search(r"^refused /work/src/img2gray/ESCAPED$", log, re.M)  # its copy is read-only
    assert len(re.findall(r"^refused ", log, re.M)) == 3 and not re.search(r"^wrote ", log, re.M)
    # never root
    assert present(re.search(r"^uid (\d+)$", log, re.M))[1] == str(os.getuid() or 10001)
    assert snapshot(kernel) == before
    assert not list(tmp_path.rglob("ESCAPED"))
    assert our_containers() == []

    # The same kernel on the host runner does write into the user's tree: the check is real.
    local = run_factory("build", "matrix.yaml", "--out", out, "--runner", "local",
                        cwd=tmp_path, env=cache_env(factory_cache))
    assert local.exit == 1
    assert (kernel / "ESCAPED").exists()
    log = (out / "logs" / "img2gray-cu130torch211-x86_64.log").read_text()
    assert re.search(rf"^wrote {kernel}/ESCAPED$", log, re.M)


def test_ctrl_c_removes_the_containers(tmp_path: Path, factory_cache: Path,
                                       bullseye_base: str) -> None:
    kernel = hostile_kernel(tmp_path / "slow", 'sleep 300; exec "$0" "$@"')
    docker_matrix(tmp_path, kernel)
    log = tmp_path / "index" / "logs" / "img2gray-cu130torch211-x86_64.log"
    # SIGINT as a terminal's Ctrl-C delivers it: a suite started in the background of a
    # non-interactive shell inherits SIGINT ignored, and Python then keeps ignoring it.
    process = subprocess.Popen([sys.executable, "-m", "factory", "build", "matrix.yaml"],
                               cwd=tmp_path, env={**os.environ, **cache_env(factory_cache),
                                    "PYTHONFAULTHANDLER": "1"},
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 600
        while not (log.is_file() and "csrc/img2gray.cu" in log.read_text()):
            assert process.poll() is None, present(process.stdout).read()
            assert time.monotonic() < deadline, "the build never reached the compile step"
            time.sleep(0.5)
        time.sleep(2)  # the torch bindings' compile is now waiting in its wrapper
        running = our_containers()
        (build,) = [name for name in running if name.endswith("-build")]
        settings = subprocess.run(
            ["docker", "inspect", "--format", "{{.HostConfig.NetworkMode}} {{.Config.User}} "
             "{{.HostConfig.CapDrop}} {{range .Mounts}}{{.Destination}}:{{.RW}} {{end}}", build],
            capture_output=True, text=True, check=True).stdout.split()
        assert settings[0] == "none" and settings[2] == "[ALL]", settings
        user = "10001:10001" if os.getuid() == 0 else f"{os.getuid()}:{os.getgid()}"
        assert settings[1] == user
        # the cache, read-only; the object cache's part of its base, read-write
        mounts = dict(mount.rsplit(":", 1) for mount in settings[3:])
        assert mounts == {f"/cache/docker/{slug(BASE)}": "false", "/objects": "true"}, mounts
        started = time.monotonic()
        process.send_signal(signal.SIGINT)
        try:
            output, _ = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:  # where it hangs: faulthandler's dump on SIGABRT
            process.send_signal(signal.SIGABRT)
            output, _ = process.communicate(timeout=30)
            pytest.fail(f"still running 60 s after Ctrl-C; containers {our_containers()}\n"
                        f"{output}")
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, output
    assert "interrupted" in output
    assert time.monotonic() - started < 30
    assert our_containers() == []
    assert list((tmp_path / "index" / "files").iterdir()) == []


def test_auto_takes_docker_when_it_can_and_says_why(tmp_path: Path, factory_cache: Path,
                                                    bullseye_base: str) -> None:
    write(tmp_path / "matrix.yaml", f"""
        kernels: [{{path: {REPO / "tests" / "fixtures" / "noarch-kernel"}, version: 2.0.0}}]
        torch: ["2.11"]
        cuda: {{"13.0": {{sms: ["9.0"]}}}}
        docker: {{base: {BASE}}}
    """)
    env = cache_env(factory_cache)
    chosen = run_factory("build", "matrix.yaml", "--out", "a", cwd=tmp_path, env=env)
    assert chosen.exit == 0, chosen.stdout + chosen.stderr
    assert re.search(r"^runner: docker \(docker \S+ answers\)$", chosen.stdout, re.M)
    without = run_factory("build", "matrix.yaml", "--out", "b", cwd=tmp_path,
                          env={**env, "DOCKER_HOST": "unix:///nonexistent.sock"})
    assert without.exit == 0, without.stdout + without.stderr
    assert re.search(r"^runner: local \(no docker daemon answers \(.*nonexistent\.sock",
                     without.stdout, re.M)
    assert "no builder image is needed" in run_factory("images", "matrix.yaml", cwd=tmp_path,
                                                       env=env).stdout
    docker_matrix(tmp_path, EXAMPLE)
    images = run_factory("images", "matrix.yaml", cwd=tmp_path, env=env)
    assert images.exit == 0, images.stdout + images.stderr
    assert re.search(r"^image kernel-wheel-factory/builder-cu13\.0-x86_64:\S+ \(CUDA 13\.0, "
                     rf"x86_64, base {re.escape(BASE)}\)$", images.stdout, re.M), images.stdout
    assert our_containers() == []


def test_an_installed_factory_builds_the_same_image(tmp_path: Path, factory_cache: Path) -> None:
    """Installed from its wheel (not from this checkout), the factory finds its Dockerfiles
    and assembles the same build context, so it names the same image."""
    from packaging.version import Version
    from uv import find_uv_bin

    from factory.cells.runners.docker.image import builder_image, requirements

    env = {**os.environ, "UV_CACHE_DIR": str(factory_cache / "uv")}
    def ignore(folder: str, names: list[str]) -> set[str]:
        """Outputs and environments of this checkout (at its top only: factory/index stays)."""
        top = {".git", ".venv", "build", "index", "test-artifacts", ".device-run"}
        return {name for name in names if name == "__pycache__" or name.endswith(".egg-info")
                or (Path(folder) == REPO and name in top)}

    source = shutil.copytree(REPO, tmp_path / "source", symlinks=True, ignore=ignore)
    subprocess.run([find_uv_bin(), "build", "--quiet", "--wheel", "--out-dir", tmp_path / "dist",
                    source], check=True, env=env, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("kernel_wheel_factory-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([find_uv_bin(), "venv", "--quiet", "--python", sys.executable, venv],
                   check=True, env=env)
    pins = write(tmp_path / "pins.txt", "\n".join(requirements()))
    subprocess.run([find_uv_bin(), "pip", "install", "--quiet", "--python", venv / "bin/python",
                    wheel, "-c", pins], check=True, env=env)
    probe = ("from factory.cells.runners.docker.image import builder_image, PACKAGE; "
             "from packaging.version import Version; "
             f"print(PACKAGE, builder_image(Version('13.0'), 'x86_64', {BASE!r}).name)")
    done = subprocess.run([venv / "bin/python", "-c", probe], capture_output=True, text=True,
                          cwd=tmp_path, check=True)
    package, name = done.stdout.split()
    assert package.startswith(str(venv))
    assert name == builder_image(Version("13.0"), "x86_64", BASE).name


def test_containers_of_a_killed_run_are_removed_by_the_next(tmp_path: Path, factory_cache: Path,
                                                           bullseye_base: str) -> None:
    kernel = hostile_kernel(tmp_path / "slow", 'sleep 300; exec "$0" "$@"')
    docker_matrix(tmp_path, kernel)
    log = tmp_path / "index" / "logs" / "img2gray-cu130torch211-x86_64.log"
    env = {**os.environ, **cache_env(factory_cache)}
    process = subprocess.Popen([sys.executable, "-m", "factory", "build", "matrix.yaml"],
                               cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 600
        while not (log.is_file() and "csrc/img2gray.cu" in log.read_text()):
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.5)
    finally:
        process.kill()  # SIGKILL: no chance to clean up
        process.wait()
    left = our_containers()
    assert len(left) == 2, left
    write(tmp_path / "noarch.yaml", f"""
        kernels: [{{path: {REPO / "tests" / "fixtures" / "noarch-kernel"}, version: 2.0.0}}]
        torch: ["2.11"]
        cuda: {{"13.0": {{sms: ["9.0"]}}}}
        runner: docker
        docker: {{base: {BASE}}}
    """)
    again = run_factory("build", "noarch.yaml", "--out", "other", cwd=tmp_path,
                        env=cache_env(factory_cache))
    assert "removed 2 container(s) an interrupted run left" in again.stdout, again.stdout
    assert our_containers() == []


TORCH_IMAGE = "kernel-wheel-factory/test-torch:cu130-torch211"
TORCH_IMAGE_PYTHON = "/opt/torch/bin/python"


@pytest.fixture(scope="session")
def torch_image(bullseye_base: str, factory_cache: Path) -> str:
    """An image that brings its own torch and nvcc, the way NVIDIA's PyTorch images do: on the
    offline base, torch 2.11 in a venv at /opt/torch and CUDA 13.0's nvcc from PyPI's nvidia
    wheels, CUDA_HOME pointing at it. Made with uv (the tests' cache mounted) and committed."""
    with made_once("test-torch-image"):
        if subprocess.run(["docker", "image", "inspect", TORCH_IMAGE],
                          capture_output=True).returncode == 0:
            return TORCH_IMAGE
        from uv import find_uv_bin

        from factory.cells.runners.docker.image import host_certificates

        (factory_cache / "uv").mkdir(parents=True, exist_ok=True)
        certificates = factory_cache / "test-tools" / "ca-certificates.crt"
        certificates.parent.mkdir(parents=True, exist_ok=True)
        certificates.write_bytes(host_certificates())
        site = "/opt/torch/lib/python3.11/site-packages"
        toolkit = " ".join(f"{name}==13.0.*" for name in (
            "nvidia-cuda-nvcc", "nvidia-nvvm", "nvidia-cuda-crt", "nvidia-cuda-runtime",
            "nvidia-cuda-cccl"))
        script = (f"uv venv --quiet --python /opt/python/cp311-cp311/bin/python3.11 /opt/torch && "
                  f"uv pip install --quiet --python {TORCH_IMAGE_PYTHON} 'torch==2.11.*' {toolkit} "
                  f"&& ln -s libcudart.so.13 {site}/nvidia/cu13/lib/libcudart.so")
        name = f"kwf-test-torch-image-{os.getpid()}"
        done = subprocess.run(
            ["docker", "run", "--name", name, "--mount",
             f"type=bind,source={find_uv_bin()},target=/usr/local/bin/uv,readonly",
             "--mount", f"type=bind,source={factory_cache / 'uv'},target=/uv",
             "--mount", f"type=bind,source={certificates},target=/ca.crt,readonly",
             "--env", "UV_CACHE_DIR=/uv", "--env", "UV_LINK_MODE=copy",
             "--env", "SSL_CERT_FILE=/ca.crt", bullseye_base, "sh", "-c", script],
            capture_output=True, text=True)
        try:
            assert done.returncode == 0, done.stdout + done.stderr
            subprocess.run(["docker", "commit", "--change", f"ENV CUDA_HOME={site}/nvidia/cu13",
                            name, TORCH_IMAGE], check=True, capture_output=True)
        finally:
            subprocess.run(["docker", "rm", "--force", name], capture_output=True)
        return TORCH_IMAGE


def test_an_image_with_its_own_torch_and_nvcc_builds_the_example(tmp_path: Path, torch_image: str,
                                                                 factory_cache: Path) -> None:
    """Its torch and nvcc as they are: read with the network off, every compiler run in a
    container of the image with the network off, as an unprivileged user; the gates, the
    index and the user's torch then treat the wheel like any other."""
    write(tmp_path / "matrix.yaml", f"""
        kernels:
          - {{path: {EXAMPLE}, version: 1.0.0}}
        torch:
          - {{image: {torch_image}, python: {TORCH_IMAGE_PYTHON}}}
        cuda:
          "13.0":
            sms: ["9.0"]
    """)
    # an object cache of its own: every unit is compiled in the image
    result = run_factory("build", "matrix.yaml", "--out", tmp_path / "index", "--offline",
                         "--object-cache", tmp_path / "objects", cwd=tmp_path,
                         env=cache_env(factory_cache))
    assert result.exit == 0, result.stdout + result.stderr
    assert re.search(r"runner: docker \(docker \S+ answers", result.stdout), result.stdout
    (wheel,) = (tmp_path / "index" / "files").glob("*.whl")
    assert wheel.name.startswith("img2gray-1.0.0+cu130torch211-cp39-abi3-manylinux_")
    log = (tmp_path / "index" / "logs" / "img2gray-cu130torch211-x86_64.log").read_text()
    assert f"starting a container of {torch_image} (no network" in log
    assert re.search(rf"toolchain: nvcc 13\.0\.\d+ \(image, /opt/torch/lib/python3\.11/"
                     rf"site-packages/nvidia/cu13\), torch 2\.11\.\d+\+cu130 \(/opt/torch\), "
                     rf"host compiler g\+\+ \(from the image's PATH \(\$CXX unset\)\), in a "
                     rf"container of {re.escape(torch_image)}", log), log
    compiles = [line for line in log.splitlines() if re.match(r"\$ \S*docker exec ", line)]
    assert len(compiles) == 4  # three units and the link, all inside the image
    root = os.environ["KERNEL_WHEEL_FACTORY_BUILD_ROOT"]  # this machine's, the same inside
    assert all(f"--workdir {root}/" in line for line in compiles)
    # the image's nvcc takes a seed for its random names (its probe read nvcc's options)
    cuda_units = [line for line in compiles if re.search(r"/nvcc -c \S+\.cu ", line)]
    assert cuda_units and all("-frandom-seed=" in line for line in cuda_units), compiles
    # again: the objects come from the cache, keyed by the image's id for its own files
    again = run_factory("build", "matrix.yaml", "--out", tmp_path / "again", "--offline",
                        "--object-cache", tmp_path / "objects", cwd=tmp_path,
                        env=cache_env(factory_cache))
    assert again.exit == 0 and "units: 0 compiled, 3 from the object cache" in again.stdout, \
        again.stdout + again.stderr
    assert (tmp_path / "again" / "files" / wheel.name).read_bytes() == wheel.read_bytes()
    provenance = json.loads(read_dist_info(wheel, "provenance.json"))
    assert provenance["cell"]["installed_torch"]["image"] == torch_image
    assert provenance["toolchain"]["cxx"] == "g++ 10.2.1"  # the image's compiler
    assert "Requires-Dist: torch==2.11.*" in read_dist_info(wheel, "METADATA")
    venv = new_torch_venv(tmp_path / "venv", factory_cache)
    assert run_example(venv, wheel, tmp_path)["results"] == [True] * 4
    assert our_containers() == []


def test_cutile_and_triton_cells_build_and_load_in_the_builder_image(tmp_path: Path,
        factory_cache: Path, bullseye_base: str) -> None:
    """A cuTile project (its build environment and assembler prepared with the network on,
    compiled and imported with it off) and a triton kernel (a wheel per cell, imported with
    its torch) through the docker runner."""
    write(tmp_path / "matrix.yaml", f"""
        kernels:
          - {{path: {REPO / "examples" / "tile-add"}}}
          - {{path: {REPO / "tests" / "fixtures" / "triton-add"}, version: 1.0.0}}
        torch: ["2.11"]
        cuda: {{"13.0": {{sms: ["9.0"]}}}}
        runner: docker
        docker: {{base: {BASE}}}
    """)
    result = run_factory("build", "matrix.yaml", cwd=tmp_path, env=cache_env(factory_cache))
    assert result.exit == 0, result.stdout + result.stderr
    assert "runner: docker" in result.stdout
    names = sorted(w.name for w in (tmp_path / "index" / "files").glob("*.whl"))
    assert names == ["tile_add-1.0.0+cu130torch211-py3-none-manylinux_2_17_x86_64."
                     "manylinux2014_x86_64.whl",
                     "triton_add-1.0.0+cu130torch211-py3-none-any.whl"]
    log = (tmp_path / "index" / "logs" / "tile-add-cu130torch211-x86_64.log").read_text()
    assert "cubins: sm_90 6" in log and "op tile_add::add" in log


def test_a_free_threaded_cell_the_builder_image_has_no_interpreter_for_is_skipped(
        tmp_path: Path, factory_cache: Path, bullseye_base: str) -> None:
    """The Debian base has CPython 3.11 and 3.13 with the GIL only: the example's cp313t cell
    is skipped, saying what the image lacks, and its abi3 cell is built."""
    matrix = docker_matrix(tmp_path, EXAMPLE)
    write(matrix, matrix.read_text() + 'python: ["3.13t"]\n')
    out = tmp_path / "index"
    result = run_factory("build", matrix, "--out", out, env=cache_env(factory_cache))
    assert result.exit == 0, result.stdout + result.stderr
    assert "img2gray/cu130torch211/x86_64: built" in result.stdout
    log = (out / "logs" / "img2gray-cu130torch211-x86_64-cp313t.log").read_text()
    assert "SKIPPED: the builder image kernel-wheel-factory/builder-cu13.0-x86_64:" in log, log
    assert "has no free-threaded CPython 3.13t (/opt/python/cp313-cp313t/bin/python)" in log
    assert "1 built, 0 unchanged, 0 failed, 1 skipped" in result.stdout
