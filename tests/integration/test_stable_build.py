"""A stable-ABI kernel built for real: the fixture in a matrix of torch 2.11, 2.12 and 2.13 with
CUDA 13.0 is compiled once; its one wheel is listed in the three cells' indexes, installs from
each into a fresh environment of that torch, and its op runs there; the import guard refuses
an older torch; a torch added to the matrix as index-only is served without a compile; and a
kernel that declares the stable ABI but calls torch's C++ outside it is refused."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pypi_simple import ProjectPage

from ..support.factory import STABLE_KERNEL, Result, cache_env, run_factory, snapshot, stable_matrix
from ..support.installs import read_dist_info, uv
from ..support.servers import serving

pytestmark = [pytest.mark.slow, pytest.mark.network]

WHEEL = "stable_kernel-1.0.0+cu13.stable.torch2.11-cp39-abi3-manylinux_2_{}_x86_64.whl"
LABELS = ("cu130torch211", "cu130torch212", "cu130torch213")
CHECK = """
import json, torch, stable_kernel
from torch._subclasses.fake_tensor import FakeTensorMode
x = torch.arange(6, dtype=torch.float32)
y = stable_kernel.scale(x, 2.5)
with FakeTensorMode():
    fake = stable_kernel.scale(torch.empty(4, 3), 2.0)
print(json.dumps({"torch": torch.__version__, "right": torch.equal(y, x * 2.5),
                  "fake": list(fake.shape), "file": stable_kernel.__file__}))
"""


def the_wheel(out: Path) -> Path:
    (wheel,) = (out / "files").glob("*.whl")
    return wheel


def listed(out: Path, label: str) -> list[str]:
    page = out / label / "simple" / "stable-kernel" / "index.html"
    return [package.filename for package in ProjectPage.from_html(
        "stable-kernel", page.read_text()).packages]


@pytest.fixture(scope="module")
def served(stable_build: tuple[Path, Result]) -> Iterator[str]:
    with serving(stable_build[0]) as url:
        yield url


def test_one_compile_one_wheel_in_three_cells(stable_build: tuple[Path, Result]) -> None:
    out, result = stable_build
    assert "1 built, 0 unchanged, 0 failed, 0 skipped" in result.stdout, result.stdout
    assert ("stable-kernel/cu13.stable.torch2.11/x86_64: one stable-ABI wheel (torch>=2.11) "
            "for the cells cu130torch211, cu130torch212, cu130torch213") in result.stdout
    wheel = the_wheel(out)
    assert wheel.name == WHEEL.format(wheel.name.split("manylinux_2_")[1].split("_")[0])
    metadata = read_dist_info(wheel, "METADATA")
    assert [line for line in metadata.splitlines() if line.startswith("Requires-Dist")] == [
        "Requires-Dist: torch>=2.11"]
    for label in LABELS:
        assert listed(out, label) == [wheel.name], label
    # its own label names a build, not a cell: no index of its own
    assert sorted(p.parent.name for p in out.glob("*/simple")) == sorted(LABELS)
    report = json.loads(run_factory("inspect", wheel, "--json").stdout)["wheels"][0]
    assert report["problems"] == []
    (shared,) = report["shared_objects"]
    assert shared["unstable_torch_symbols"] == []
    assert report["provenance"]["cell"]["stable_abi"] == "2.11"
    browse = json.loads((out / "browse" / "stable-kernel.json").read_text())
    (release,) = browse["versions"]
    assert [(c["torch"], c["label"], c["served_by"], [w["filename"] for w in c["wheels"]])
            for c in release["cells"]] == [
        (torch, label, "stable-kernel/cu13.stable.torch2.11/x86_64", [wheel.name])
        for torch, label in zip(("2.11", "2.12", "2.13"), LABELS, strict=True)]
    assert all(c["ops"][0]["fake"] for c in release["cells"])


@pytest.mark.parametrize("torch", ["2.11", "2.12", "2.13"])
def test_it_installs_from_each_cells_index_and_runs_with_that_torch(served: str, torch: str,
        tmp_path: Path, factory_cache: Path) -> None:
    venv = tmp_path / "venv"
    made = uv("venv", "--quiet", "--python", sys.executable, venv, cache=factory_cache)
    assert made.returncode == 0, made.stderr
    label = "cu130torch" + torch.replace(".", "")
    installed = uv("pip", "install", "--python", venv / "bin" / "python", f"torch=={torch}.*",
                   "stable-kernel", "--extra-index-url", f"{served}{label}/simple",
                   cache=factory_cache)
    assert installed.returncode == 0, installed.stderr
    assert "+ stable-kernel==1.0.0+cu13.stable.torch2.11" in installed.stderr, installed.stderr
    ran = subprocess.run([venv / "bin" / "python", "-c", CHECK], capture_output=True, text=True,
                         cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    facts = json.loads(ran.stdout.splitlines()[-1])
    assert facts["torch"].startswith(torch + ".") and facts["torch"].endswith("+cu130"), facts
    assert facts["right"] and facts["fake"] == [4, 3]
    assert facts["file"].startswith(str(venv)), facts
    # the doctor, asked with this torch, names this torch's cell index
    doctor = run_factory("doctor", served, "stable-kernel", "--json", "--python",
                         venv / "bin" / "python")
    (package,) = json.loads(doctor.stdout)["packages"]
    assert package["fits"]["index"] == f"{served}{label}/simple/", package


def test_the_guard_refuses_an_older_torch(stable_build: tuple[Path, Result], tmp_path: Path,
                                          factory_cache: Path) -> None:
    """torch 2.10 on PyPI is a CUDA 12.8 build: too old, and of another CUDA major."""
    venv = tmp_path / "venv"
    assert uv("venv", "--quiet", "--python", sys.executable, venv,
              cache=factory_cache).returncode == 0
    for args in (["torch==2.10.*"], ["--no-deps", the_wheel(stable_build[0])]):
        done = uv("pip", "install", "--python", venv / "bin" / "python", *args,
                  cache=factory_cache)
        assert done.returncode == 0, done.stderr
    ran = subprocess.run([venv / "bin" / "python", "-c", "import stable_kernel"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert ran.returncode == 1
    assert ran.stderr.strip().splitlines()[-1] == (
        "ImportError: stable-kernel 1.0.0+cu13.stable.torch2.11 was built for torch 2.11 or "
        "newer with CUDA 13, but this environment has torch 2.10.0+cu128 with CUDA 12.8. "
        "Install the stable-kernel wheel built for it, from the 'cu128torch210' index "
        "(.../cu128torch210/simple), or install torch 2.11 or newer with CUDA 13.")


def test_an_index_only_torch_is_served_without_a_compile(stable_build: tuple[Path, Result],
                                                         tmp_path: Path,
                                                         factory_cache: Path) -> None:
    out = shutil.copytree(stable_build[0], tmp_path / "index", symlinks=True)
    files = snapshot(out / "files")
    matrix = stable_matrix(tmp_path, extra=', {version: "2.14", index-only: true}')
    result = run_factory("build", matrix, "--out", out, env=cache_env(factory_cache))
    assert result.exit == 0, result.stdout + result.stderr
    assert "0 built, 1 unchanged, 0 failed, 0 skipped" in result.stdout, result.stdout
    assert snapshot(out / "files") == files
    assert listed(out, "cu130torch214") == [the_wheel(out).name]
    browse = json.loads((out / "browse.json").read_text())
    assert browse["torch"] == ["2.14", "2.13", "2.12", "2.11"]
    # every page made again from files/ and the manifest's cells: the same cells list it
    pages = {path: data for path, data in snapshot(out).items() if "simple" in path}
    assert run_factory("index", "--out", out).exit == 0
    assert {path: data for path, data in snapshot(out).items() if "simple" in path} == pages


def test_a_call_outside_the_stable_abi_fails_the_cell_with_the_symbol_named(tmp_path: Path,
        factory_cache: Path) -> None:
    kernel = shutil.copytree(STABLE_KERNEL, tmp_path / "leaky")
    binding = kernel / "torch-ext" / "torch_binding.cpp"
    text = binding.read_text()
    # torch refuses its c10 headers in a stable-ABI build, so the call is declared by hand
    text = text.replace('#include "registration.h"', '#include "registration.h"\n\n'
                        "namespace c10 {\nstruct Allocator;\nAllocator* GetCPUAllocator();\n}")
    text = text.replace("  Tensor input = torch::stable::contiguous(x);",
                        '  STD_TORCH_CHECK(c10::GetCPUAllocator() != nullptr, "no allocator");\n'
                        "  Tensor input = torch::stable::contiguous(x);")
    binding.write_text(text)
    out = tmp_path / "index"
    result = run_factory("build", stable_matrix(tmp_path, kernel), "--out", out,
                         env=cache_env(factory_cache))
    assert result.exit == 1
    log = (out / "logs" / "stable-kernel-cu13.stable.torch2.11-x86_64.log").read_text()
    assert "stable ABI: the kernel declares torch's stable ABI 2.11, but" in log
    assert "calls 1 symbol(s) of torch's C++ outside it: c10::GetCPUAllocator()" in log
    assert not list((out / "files").glob("*.whl"))
    assert not list(out.glob("*/simple"))
