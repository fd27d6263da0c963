"""CPU cells end to end: the example (backends cuda and cpu) built with `cpu: true` gets a CUDA
cell and a CPU cell (label cputorch211) from one build; the CPU wheel needs no CUDA library,
carries no GPU code, passes its import gate and its kernel's CPU tests, installs from its own
index with pip and computes what the reference gives, is rebuilt byte for byte, and doctor and
the browse page offer it where no CUDA build fits."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..support.factory import Result

if TYPE_CHECKING:
    from playwright.sync_api import Browser

import re
import subprocess
import zipfile
from pathlib import Path

import pytest

from factory import doctor
from factory.wheel.inspect import inspect_wheel

from ..support.browser import open_page, shot, text
from ..support.factory import EXAMPLE, cache_env, example_built_and_tested, run_factory
from ..support.installs import venv_python
from ..support.servers import serving

pytestmark = [pytest.mark.slow]

CPU_WHEEL = re.compile(
    r"img2gray-1\.0\.0\+cputorch211-cp39-abi3-manylinux_(\d+)_(\d+)_x86_64\.whl")
MACHINE = {"python": "3.12.3", "implementation": "cpython", "abi": "cp312", "platform": "linux",
           "machine": "x86_64", "glibc": "2.39"}


@pytest.fixture(scope="module")
def cpu_build(tmp_path_factory: pytest.TempPathFactory,
              factory_cache: Path) -> tuple[Path, Path, Result]:
    out, done = example_built_and_tested(tmp_path_factory.mktemp("cpu"), "cpu: true", factory_cache)
    wheels = {path.name: path for path in (out / "files").glob("*.whl")}
    assert len(wheels) == 2, wheels
    [cpu] = [path for name, path in wheels.items() if CPU_WHEEL.fullmatch(name)]
    return out, cpu, done


def test_one_build_makes_the_cuda_cell_and_the_cpu_cell(
        cpu_build: tuple[Path, Path, Result]) -> None:
    out, wheel, done = cpu_build
    assert "img2gray/cu130torch211/x86_64" in done.stdout
    assert "img2gray/cputorch211/x86_64" in done.stdout
    assert "CPU cells are built on this machine" in done.stdout
    listed = sorted(path.name for path in (out / "cputorch211" / "simple" / "img2gray").iterdir())
    assert listed == ["index.html", "index.json"]
    assert wheel.name in (out / "cputorch211" / "simple" / "img2gray" / "index.html").read_text()
    assert wheel.name not in (out / "cu130torch211" / "simple" / "img2gray" /
                              "index.html").read_text()


def test_the_cpu_wheel_needs_no_cuda(cpu_build: tuple[Path, Path, Result]) -> None:
    out, wheel, _ = cpu_build
    report = inspect_wheel(wheel)
    (so,) = report.shared_objects
    assert not so.sass and not so.ptx
    assert not [name for name in so.needed if "cuda" in name or name.startswith("libnv")], \
        so.needed
    assert {"libc10.so", "libtorch_cpu.so"} <= set(so.needed)
    assert report.torch_requirement == "==2.11.*"
    log = (out / "logs" / "img2gray-cputorch211-x86_64.log").read_text()
    assert "toolchain: no CUDA (a CPU cell)" in log and "nvcc" not in log.split("checking")[0]
    assert re.search(r"op _img2gray_\w+::img2gray: kernels for CPU, Meta;", log), log  # no CUDA
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read("img2gray/metadata.json").decode()
    assert '"type": "cpu"' in metadata


def test_the_kernels_cpu_tests_pass_and_its_gpu_tests_are_skipped(
        cpu_build: tuple[Path, Path, Result]) -> None:
    _, _, done = cpu_build
    lines = [line for line in done.stdout.splitlines() if "img2gray/cputorch211" in line]
    assert any(re.search(r"8 passed, 0 failed, 6 skipped with no GPU", line) for line in lines), \
        done.stdout


def test_pip_installs_it_from_its_index_and_it_computes_the_reference(
        cpu_build: tuple[Path, Path, Result], torch_venv: Path, tmp_path: Path) -> None:
    out, _, _ = cpu_build
    # an environment of its own that sees the shared torch venv's torch (the other tests
    # install the CUDA wheel into that venv)
    subprocess.run([str(torch_venv / "bin" / "python"), "-m", "venv", str(tmp_path / "venv")],
                   check=True)
    python = tmp_path / "venv" / "bin" / "python"
    torch_site = venv_python(torch_venv, "-c",
                             "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip()
    own_site = venv_python(tmp_path / "venv", "-c",
                           "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip()
    Path(own_site, "torch-venv.pth").write_text(torch_site + "\n")
    with serving(out) as url:
        done = subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-cache-dir",
                               "--force-reinstall", "img2gray==1.0.0+cputorch211",
                               "--extra-index-url", f"{url}cputorch211/simple/"],
                              capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    program = ("import torch, img2gray\n"
               "g = torch.Generator().manual_seed(3)\n"
               "rgb = torch.randint(0, 256, (33, 17, 3), dtype=torch.uint8, generator=g)\n"
               "w = (rgb.to(torch.int32) * torch.tensor([210, 720, 70])).sum(-1)\n"
               "print(torch.equal(img2gray.img2gray(rgb), ((w + 500) // 1000).to(torch.uint8)))\n")
    ran = subprocess.run([str(python), "-c", program], capture_output=True, text=True)
    assert ran.returncode == 0 and ran.stdout.split() == ["True"], ran.stdout + ran.stderr


def test_a_cpu_wheel_is_rebuilt_byte_for_byte(cpu_build: tuple[Path, Path, Result],
                                              factory_cache: Path) -> None:
    _, wheel, _ = cpu_build
    done = run_factory("verify", wheel, "--source", EXAMPLE, env=cache_env(factory_cache))
    assert done.exit == 0, done.stdout + done.stderr
    assert "byte-identical" in done.stdout


def test_doctor_and_the_browse_page_offer_the_cpu_build(cpu_build: tuple[Path, Path, Result],
                                                        browser: Browser, tmp_path: Path) -> None:
    out, wheel, _ = cpu_build
    cpu_torch = {**MACHINE, "torch": {"version": "2.11.0+cpu", "cuda": None, "cxx11_abi": True},
                 "driver": None}
    gpu = {**MACHINE, "torch": {"version": "2.11.0+cu130", "cuda": "13.0", "cxx11_abi": True},
           "driver": {"cuda": "13.0", "gpus": [{"name": "NVIDIA H100", "sm": "9.0"}]}}
    with serving(out) as url:
        (cpu,) = doctor.diagnose(url, "img2gray", cpu_torch)
        assert cpu["fits"]["wheel"] == wheel.name
        assert cpu["fits"]["index"] == f"{url}cputorch211/simple/"
        (cuda,) = doctor.diagnose(url, "img2gray", gpu)  # a GPU: the CUDA build comes first
        assert cuda["fits"]["index"] == f"{url}cu130torch211/simple/"

        page, errors = open_page(browser, url)
        page.select_option("#package", "img2gray")
        page.select_option("#torch", "2.11")
        page.select_option("#cuda", "cpu")
        page.wait_for_selector("#facts h3")
        assert "built for torch 2.11 on the CPU (any build of torch 2.11, with or without " \
               "CUDA)" in text(page, "#status")
        assert text(page, "#pip-command") == \
            f"pip install img2gray==1.0.0+cputorch211 --extra-index-url {url}cputorch211/simple/"
        assert text(page, "#facts h3") == "This wheel: torch 2.11, CPU"
        assert "GPU code\nnone (a CPU build)" in page.inner_text("#facts")
        shot(page, "browse-cpu")
        page.select_option("#cuda", "13.0")
        page.click("#detect summary")
        page.fill("#paste", "2.11.0+cpu None")  # what a CPU build of torch prints
        page.wait_for_function("document.getElementById('paste-result').textContent"
                               ".includes('CPU builds')")
        assert page.input_value("#cuda") == "cpu"
        assert "on the CPU" in text(page, "#status")
        assert errors == []


def test_a_cpu_only_torch_is_refused_by_the_cuda_wheels_guard_not_by_the_cpu_wheels(
        cpu_build: tuple[Path, Path, Result]) -> None:
    """The import guard a CPU wheel carries checks torch's minor only."""
    _, wheel, _ = cpu_build
    with zipfile.ZipFile(wheel) as archive:
        ops = archive.read("img2gray/_ops.py").decode()
    assert "its CPU ops" in ops and "cuda_major" not in ops
    namespace: dict[str, object] = {}
    fake: Any = type("torch", (), {"__version__": "2.11.0+cpu"})
    guard = ops[ops.index("def _check_torch"):ops.index("del _check_torch")]
    exec(compile(guard, "_ops.py", "exec"), {"torch": fake}, namespace)  # accepts any 2.11
    fake.__version__ = "2.10.0+cpu"
    with pytest.raises(ImportError, match=r"built for torch 2.11 \(its CPU ops\).*cputorch210"):
        exec(compile(guard, "_ops.py", "exec"), {"torch": fake}, namespace)
