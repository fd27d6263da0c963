"""aarch64 wheels made on this x86_64 machine: the example cross-compiled for one aarch64 cell
(sm_90, as GH200 needs) with `cross: true`, checked by auditwheel as an aarch64 wheel, imported
and tested by the emulated aarch64 CPython with the cell's aarch64 torch (qemu), and rebuilt
byte for byte by `factory verify`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..support.checks import present
from ..support.factory import Result

if TYPE_CHECKING:
    from playwright.sync_api import Browser

import io
import os
import re
import shutil
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from factory import doctor

from ..support.browser import open_page, shot, text
from ..support.factory import (
    EXAMPLE,
    cache_env,
    example_built_and_tested,
    kept_project,
    run_factory,
)
from ..support.servers import serving

pytestmark = [pytest.mark.slow]

WHEEL = re.compile(r"img2gray-1\.0\.0\+cu130torch211-cp39-abi3-manylinux_(\d+)_(\d+)_aarch64\.whl")


# A test of the kernel's own that reaches out of its sandbox: it writes beside the build's
# folder and connects to a server of this machine, whose port this run writes into that folder,
# and passes whatever comes of it. The file is the same in every run, so that the kernel (kept
# in the tests' cache) keeps its op namespace and the next run is served its objects.
REACHING = """
import socket
from pathlib import Path

BESIDE = Path({beside!r})


def test_reach_out():
    try:
        (BESIDE / "reached").write_text("written from the emulated tests")
    except OSError:
        pass
    try:
        port = int((BESIDE / "port").read_text())
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except (OSError, ValueError):
        pass
"""
BESIDE = Path(os.environ["KERNEL_WHEEL_FACTORY_BUILD_ROOT"]).parent / "reach-out"


def reaching_kernel(folder: Path) -> None:
    shutil.copytree(EXAMPLE, folder)
    (folder / "tests" / "test_reach_out.py").write_text(REACHING.format(beside=str(BESIDE)))


@pytest.fixture(scope="module")
def cross_build(tmp_path_factory: pytest.TempPathFactory,
                factory_cache: Path) -> tuple[Path, Path, Result, Path, bool, Path]:
    """The example (with a test that reaches out of the sandbox) cross-built and tested, while
    a server here counts the connections it gets."""
    folder = tmp_path_factory.mktemp("cross")
    kernel = kept_project("img2gray", reaching_kernel)
    BESIDE.mkdir(parents=True, exist_ok=True)
    sentinel = BESIDE / "reached"
    sentinel.unlink(missing_ok=True)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(0)
        (BESIDE / "port").write_text(str(listener.getsockname()[1]))
        out, done = example_built_and_tested(folder, "platforms: [aarch64]\ncross: true",
                                             factory_cache, kernel)
        try:
            listener.accept()[0].close()
            connected = True
        except BlockingIOError:
            connected = False
    wheels = sorted((out / "files").glob("*.whl"))
    assert len(wheels) == 1 and WHEEL.fullmatch(wheels[0].name), wheels
    return out, wheels[0], done, sentinel, connected, kernel


def test_the_emulated_tests_run_confined(
        cross_build: tuple[Path, Path, Result, Path, bool, Path]) -> None:
    """The kernel's tests ran (their test passed) but wrote nothing outside their folder and
    reached no server of this machine."""
    out, _, _, sentinel, connected, _ = cross_build
    log = (out / "logs" / "img2gray-cu130torch211-aarch64.log").read_text()
    assert re.search(r"tests/test_reach_out\.py \.", log), log
    assert "the emulated CPython runs the kernel's code confined by bubblewrap" in log
    assert not sentinel.exists()
    assert not connected


def test_the_cell_is_cross_compiled_into_an_aarch64_wheel(
        cross_build: tuple[Path, Path, Result, Path, bool, Path]) -> None:
    out, wheel, done, *_ = cross_build
    assert "img2gray/cu130torch211/aarch64" in done.stdout
    assert "aarch64 cells are cross-compiled on this machine" in done.stdout
    with zipfile.ZipFile(wheel) as archive:
        objects = [name for name in archive.namelist() if name.endswith(".abi3.so")]
        assert len(objects) == 1
        elf = ELFFile(io.BytesIO(archive.read(objects[0])))
        assert elf["e_machine"] == "EM_AARCH64"
    shown = subprocess.run([sys.executable, "-m", "auditwheel", "show", str(wheel)],
                           capture_output=True, text=True)
    text = " ".join(shown.stdout.split())
    major, minor = present(WHEEL.fullmatch(wheel.name)).groups()
    # `show` cannot find torch's libraries (they come with torch); the symbol versions decide.
    assert f'This constrains the platform tag to "manylinux_{major}_{minor}_aarch64"' in text, \
        shown.stdout + shown.stderr
    log = (out / "logs" / "img2gray-cu130torch211-aarch64.log").read_text()
    assert "aarch64-linux-gnu-g++" in log
    assert "SASS sm_90, PTX compute_90" in log
    # the import gate ran the emulated CPython of the cell's aarch64 torch
    assert re.search(r"loading \S+aarch64\.whl with \S+-aarch64-py3\.11-\S+/bin/python", log), log
    assert re.search(r"op _img2gray_\w+::img2gray: kernels for CPU, CUDA, Meta", log), log


def test_the_kernels_own_tests_run_its_cpu_op_under_emulation(
        cross_build: tuple[Path, Path, Result, Path, bool, Path]) -> None:
    out, _, done, *_ = cross_build
    found = re.search(r"(\d+) passed, 0 failed, (\d+) skipped with no GPU", done.stdout)
    assert found and int(found[1]) >= 8, done.stdout
    log = (out / "logs" / "img2gray-cu130torch211-aarch64.log").read_text()
    assert "--python-platform aarch64-manylinux_2_36" in log
    assert "platform linux -- Python 3.11" in log  # Debian's arm64 CPython, not this one's


def test_the_emulated_cpython_computes_what_the_reference_gives(
        cross_build: tuple[Path, Path, Result, Path, bool, Path], factory_cache: Path,
        tmp_path: Path) -> None:
    _, wheel, *_ = cross_build
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(tmp_path / "site")
    [python] = Path(factory_cache, "envs").glob("torch2.11-cu130-aarch64-py3.11-*/bin/python")
    program = ("import platform, torch, img2gray\n"
               "g = torch.Generator().manual_seed(1)\n"
               "rgb = torch.randint(0, 256, (9, 11, 3), dtype=torch.uint8, generator=g)\n"
               "w = (rgb.to(torch.int32) * torch.tensor([210, 720, 70])).sum(-1)\n"
               "print(platform.machine(), torch.equal(img2gray.img2gray(rgb),"
               " ((w + 500) // 1000).to(torch.uint8)))\n")
    done = subprocess.run([str(python), "-c", program], capture_output=True, text=True,
                          env={"PYTHONPATH": str(tmp_path / "site")}, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["aarch64", "True"]


def test_a_cross_built_wheel_is_rebuilt_byte_for_byte(
        cross_build: tuple[Path, Path, Result, Path, bool, Path], factory_cache: Path) -> None:
    _, wheel, *_, kernel = cross_build
    done = run_factory("verify", wheel, "--source", kernel, env=cache_env(factory_cache))
    assert done.exit == 0, done.stdout + done.stderr
    assert "byte-identical" in done.stdout


GH200 = {"python": "3.12.3", "implementation": "cpython", "abi": "cp312", "platform": "linux",
         "machine": "aarch64", "glibc": "2.39",
         "torch": {"version": "2.11.0+cu130", "cuda": "13.0", "cxx11_abi": True},
         "driver": {"cuda": "13.0", "gpus": [{"name": "NVIDIA GH200 480GB", "sm": "9.0"}]}}


def test_doctor_and_the_browse_page_know_both_platforms(
        cross_build: tuple[Path, Path, Result, Path, bool, Path],
        example_build: tuple[Path, Result], browser: Browser, tmp_path: Path) -> None:
    cross_out, cross_wheel, *_ = cross_build
    site = tmp_path / "site"
    merged = run_factory("index", "--out", site, "--merge", example_build[0], cross_out)
    assert merged.exit == 0, merged.stdout + merged.stderr
    h100 = {**GH200, "machine": "x86_64",
            "driver": {"cuda": "13.0", "gpus": [{"name": "NVIDIA H100", "sm": "9.0"}]}}
    with serving(site) as url:
        (arm,) = doctor.diagnose(url, "img2gray", GH200)
        assert arm["fits"]["wheel"] == cross_wheel.name and arm["fits"]["cross"] is True
        assert arm["fits"]["index"] == f"{url}cu130torch211/simple/"
        said = "\n".join(doctor.describe_diagnosis([arm]))
        assert "cross-compiled on x86_64" in said and "has not run on a GPU" in said
        (x86,) = doctor.diagnose(url, "img2gray", h100)
        assert x86["fits"]["wheel"].endswith("_x86_64.whl") and x86["fits"]["cross"] is False
        assert x86["fits"]["index"] == arm["fits"]["index"]  # one index, a wheel per machine

        page, errors = open_page(browser, url)
        page.select_option("#package", "img2gray")
        page.select_option("#torch", "2.11")
        page.select_option("#cuda", "13.0")
        page.wait_for_selector("#facts h3")
        status = text(page, "#status")
        assert "built for torch 2.11 and CUDA 13.0 (x86_64 and aarch64; the installer takes " \
               "the one of your machine)" in status, status
        facts = " ".join(page.inner_text("#facts").split())
        assert cross_wheel.name in facts and "platform x86_64" in facts
        assert "aarch64, cross-compiled on x86_64: imported and its CPU tests run under " \
               "emulation; its GPU code is in the wheel but has not run" in facts
        shot(page, "browse-aarch64")
        assert errors == []
