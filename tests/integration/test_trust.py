"""Wheels people can trust, on the shipped example built for real: `factory inspect`, the gates
inside `factory build`, the import guard against another torch, the provenance records, and
byte-for-byte rebuilds checked by `factory verify`."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from factory import __version__
from factory.sources.tree import tree_digest

from ..support.checks import present
from ..support.factory import (
    EXAMPLE,
    EXAMPLE_WHEEL,
    FIXTURES,
    REPO,
    Result,
    cache_env,
    run_factory,
    snapshot,
    write,
)
from ..support.installs import pip_install, venv_python

pytestmark = [pytest.mark.slow, pytest.mark.network]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def member(wheel: Path, suffix: str) -> bytes:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(suffix)]
        return archive.read(name)


def test_inspect_json_reports_the_example_wheel(example_wheel: Path) -> None:
    result = run_factory("inspect", "--json", example_wheel)
    assert result.exit == 0, result.stdout + result.stderr
    document = json.loads(result.stdout)
    assert document["schema"] == "kernel-wheel-factory/inspect/1"
    (wheel,) = document["wheels"]
    major, minor = present(EXAMPLE_WHEEL.fullmatch(example_wheel.name)).groups()
    assert wheel["name"] == "img2gray" and wheel["version"] == "1.0.0+cu130torch211"
    assert wheel["label"] == "cu130torch211" and wheel["torch"] == "==2.11.*"
    assert wheel["tags"] == [f"cp39-abi3-manylinux_{major}_{minor}_x86_64"]
    assert wheel["requires_python"] == ">=3.9" and wheel["sha256"] == sha256(example_wheel)
    assert wheel["sass"] == ["sm_90"] and wheel["ptx"] == ["compute_90"]
    (so,) = wheel["shared_objects"]
    assert re.fullmatch(r"img2gray/_img2gray_[0-9a-f]{7}\.abi3\.so", so["path"])
    assert {"libc10.so", "libtorch_cpu.so", "libc10_cuda.so", "libcudart.so.13",
            "libstdc++.so.6", "libc.so.6"} <= set(so["needed"])
    assert so["manylinux"] == f"manylinux_{major}_{minor}"
    assert so["abi3"]["ok"] and so["abi3"]["computed"] == "3.9"
    assert wheel["problems"] == []
    assert wheel["provenance"]["cell"]["gpu_code"] == ["compute_90", "sm_90"]
    assert wheel["kernel_metadata"]["id"] == Path(so["path"]).name.split(".")[0]

    human = run_factory("inspect", example_wheel)
    assert human.exit == 0 and "checks: all passed" in human.stdout
    assert "sm_90" in human.stdout and f"manylinux_{major}_{minor}" in human.stdout


def test_provenance_and_kernel_metadata(example_wheel: Path) -> None:
    record = json.loads(member(example_wheel, ".dist-info/provenance.json"))
    assert record["schema"] == "kernel-wheel-factory/provenance/1"
    assert (record["source"]["kind"], record["source"]["location"]) == ("path",
                                                                        "examples/img2gray")
    assert record["source"]["tree_sha256"] == tree_digest(EXAMPLE)
    assert record["kernel"]["build_toml_sha256"] == sha256(EXAMPLE / "build.toml")
    assert record["cell"] | {"gpu_code": None, "rules": None} == {
        "id": "img2gray/cu130torch211/x86_64", "label": "cu130torch211",
        "label_template": "cu{cuda}torch{torch}", "torch": "2.11", "cuda": "13.0", "sms": ["9.0"],
        "ptx": True, "torch_index": None, "cuda_home": None, "platform": "x86_64",
        "gpu_code": None, "compress": "size", "rules": None}
    # the toolchain rules in force for torch 2.11 (the C++20 one starts at 2.14)
    assert [rule["name"] for rule in record["cell"]["rules"]] == ["gencode-to-cell"]
    tools = record["toolchain"]
    assert tools["nvcc"].startswith("13.0.") and tools["torch"].startswith("2.11.")
    assert tools["cxx"].startswith("g++ ") and tools["python"] == ".".join(
        map(str, sys.version_info[:3]))
    # The record's time is the source's time, the one every zip entry carries.
    epoch = record["build"]["source_date_epoch"]
    stamp = time.gmtime(epoch)[:5]
    with zipfile.ZipFile(example_wheel) as archive:
        assert {info.date_time[:5] for info in archive.infolist()} == {stamp}

    metadata = json.loads(member(example_wheel, "img2gray/metadata.json"))
    assert metadata["name"] == "img2gray" and metadata["version"] == 1
    assert metadata["license"] == "Apache-2.0" and metadata["python-depends"] == []
    assert metadata["backend"] == {"type": "cuda", "archs": ["9.0+PTX"]}
    assert metadata["kernels-minver"] == "0.17.0" and metadata["kernel-depends"] == []
    assert metadata["provenance"]["kernel-builder"] == {"version": f"kernel-wheel-factory "
                                                                   f"{__version__}"}
    assert re.fullmatch(r"_img2gray_[0-9a-f]{7}", metadata["id"])
    with zipfile.ZipFile(example_wheel) as archive:
        for name, digest in metadata["digest"]["files"].items():
            data = archive.read(f"img2gray/{name}")
            assert base64.b64encode(hashlib.sha256(data).digest()).decode() == digest
        assert sorted(metadata["digest"]["files"]) == sorted(
            n.removeprefix("img2gray/") for n in archive.namelist()
            if n.startswith("img2gray/") and not n.endswith("metadata.json"))


def test_the_kernels_loader_loads_the_installed_package(example_wheel: Path, torch_venv: Path,
                                                        tmp_path: Path) -> None:
    """kernel-builder's loader reads metadata.json from the installed package folder."""
    venv_python(torch_venv, "-m", "pip", "install", "--quiet", "kernels==0.17.2")
    pip_install(torch_venv, example_wheel)
    script = write(tmp_path / "load.py", """
        import importlib.util, pathlib
        import torch
        from kernels import get_local_kernel, get_loaded_kernels

        folder = pathlib.Path(importlib.util.find_spec("img2gray").submodule_search_locations[0])
        kernel = get_local_kernel(folder)
        rgb = torch.full((2, 3, 3), 100, dtype=torch.uint8)
        (loaded,) = get_loaded_kernels()
        print(kernel.img2gray(rgb).tolist(), loaded.metadata.id, loaded.metadata.version)
    """)
    output = venv_python(torch_venv, str(script), cwd=tmp_path).strip().splitlines()[-1]
    assert re.fullmatch(r"\[\[100, 100, 100\], \[100, 100, 100\]\] _img2gray_[0-9a-f]{7} 1",
                        output), output


@pytest.fixture(scope="session")
def cpu_torch_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """torch 2.13.0, a CPU build, installed by pip (the machine keeps that file on disk)."""
    venv = tmp_path_factory.mktemp("cpu-torch") / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    subprocess.run([venv / "bin" / "pip", "install", "--quiet", "torch==2.13.0"], check=True)
    return venv


def test_the_import_guard_names_the_right_index(example_wheel: Path, cpu_torch_venv: Path,
                                                tmp_path: Path) -> None:
    venv_python(cpu_torch_venv, "-m", "pip", "install", "--quiet", "--no-deps",
                str(example_wheel))
    python = str(cpu_torch_venv / "bin" / "python")
    imported = subprocess.run([python, "-c", "import img2gray"], capture_output=True, text=True,
                              cwd=tmp_path)
    assert imported.returncode == 1
    last = imported.stderr.strip().splitlines()[-1]
    assert last == (
        "ImportError: img2gray 1.0.0+cu130torch211 was built for torch 2.11 with CUDA 13, but "
        "this environment has torch 2.13.0+cpu, a build without CUDA. This wheel needs a CUDA "
        "build of torch: install torch 2.11 with CUDA 13, or a CUDA build of torch 2.13 and the "
        "img2gray wheel from the 'cu130torch213' index (.../cu130torch213/simple).")
    # What the guard stands in front of: the loader's own error, naming neither version.
    namespace = json.loads(member(example_wheel, "img2gray/metadata.json"))["id"]
    location = next((cpu_torch_venv / "lib").glob(f"python3.*/site-packages/img2gray/{namespace}"
                                                  ".abi3.so"))
    raw = subprocess.run([python, "-c", (
        "import importlib.util, sys, torch; "
        f"s = importlib.util.spec_from_file_location('{namespace}', '{location}'); "
        "importlib.util.module_from_spec(s)")], capture_output=True, text=True, cwd=tmp_path)
    assert raw.returncode == 1
    assert re.search(r"cannot open shared object file|undefined symbol", raw.stderr), raw.stderr


def test_two_builds_are_byte_identical_and_verify_says_so(example_build: tuple[Path, Result],
                                                          example_wheel: Path, tmp_path: Path,
                                                          factory_cache: Path) -> None:
    again = run_factory("build", example_build[0].parent / "matrix.yaml", "--out",
                        tmp_path / "second", env=cache_env(factory_cache))
    assert again.exit == 0, again.stdout + again.stderr
    (second,) = (tmp_path / "second" / "files").glob("*.whl")
    assert second.name == example_wheel.name and sha256(second) == sha256(example_wheel)

    verified = run_factory("verify", example_wheel, cwd=REPO, env=cache_env(factory_cache))
    assert verified.exit == 0, verified.stdout + verified.stderr
    assert f"recorded sha256 {sha256(example_wheel)}" in verified.stdout
    assert f"rebuilt  sha256 {sha256(example_wheel)}" in verified.stdout
    assert "verified: the rebuilt wheel is byte-identical" in verified.stdout


def test_one_changed_byte_changes_the_wheel(example_wheel: Path, tmp_path: Path,
                                            factory_cache: Path) -> None:
    kernel = shutil.copytree(EXAMPLE, tmp_path / "img2gray")
    write(tmp_path / "matrix.yaml", """
        kernels: [{path: img2gray, version: 1.0.0}]
        torch: ["2.11"]
        cuda: {"13.0": {sms: ["9.0"]}}
    """)
    env = {**cache_env(factory_cache), "SOURCE_DATE_EPOCH": "1767225600"}
    first = run_factory("build", "matrix.yaml", "--out", "a", cwd=tmp_path, env=env)
    assert first.exit == 0, first.stdout + first.stderr
    source = kernel / "csrc" / "img2gray.cu"
    text = source.read_bytes()
    source.write_bytes(text.replace(b"210", b"211", 1))  # one byte of one weight
    second = run_factory("build", "matrix.yaml", "--out", "b", cwd=tmp_path, env=env)
    assert second.exit == 0, second.stdout + second.stderr
    (a,) = (tmp_path / "a" / "files").glob("*.whl")
    (b,) = (tmp_path / "b" / "files").glob("*.whl")
    assert a.name == b.name and sha256(a) != sha256(b)

    # The original wheel no longer verifies against the changed source.
    refused = run_factory("verify", a, "--source", kernel, cwd=tmp_path, env=env)
    assert refused.exit == 1
    assert "is not the one the wheel was built from" in refused.stdout


def test_a_failed_gate_keeps_the_wheel_out(tmp_path: Path, factory_cache: Path) -> None:
    write(tmp_path / "matrix.yaml", f"""
        kernels: [{{path: {FIXTURES / "abi-leak"}, version: 1.0.0}}]
        torch: ["2.11"]
        cuda: {{"13.0": {{sms: ["9.0"]}}}}
    """)
    result = run_factory("build", "matrix.yaml", cwd=tmp_path, env=cache_env(factory_cache))
    assert result.exit == 1, result.stdout + result.stderr
    assert re.search(r"abi-leak/cu130torch211/x86_64: failed \(abi_leak-1\.0\.0\+cu130torch211-"
                     r"\S+\.whl failed its checks: abi3: abi_leak/_abi_leak_[0-9a-f]{7}\.abi3\.so "
                     r"outside the limited API: PyUnicode_AsUTF8", result.stdout), result.stdout
    assert list((tmp_path / "index" / "files").iterdir()) == []
    log = (tmp_path / "index" / "logs" / "abi-leak-cu130torch211-x86_64.log").read_text()
    assert "gate failed: abi3:" in log


def test_inspect_and_verify_refuse_bad_input(tmp_path: Path) -> None:
    missing = run_factory("inspect", tmp_path / "nope.whl")
    assert missing.exit == 2 and missing.stderr.strip().startswith("error: ")
    assert "nope.whl" in missing.stderr and len(missing.stderr.strip().splitlines()) == 1
    junk = tmp_path / "junk-1.0-py3-none-any.whl"
    junk.write_bytes(b"not a zip")
    broken = run_factory("inspect", junk)
    assert broken.exit == 2 and "cannot read the wheel" in broken.stderr
    plain = tmp_path / "plain-1.0-py3-none-any.whl"
    with zipfile.ZipFile(plain, "w") as archive:
        archive.writestr("plain/__init__.py", "")
        archive.writestr("plain-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: plain\n"
                                                          "Version: 1.0\n")
    before = snapshot(tmp_path)
    refused = run_factory("verify", plain)
    assert refused.exit == 2 and "has no provenance record" in refused.stderr
    assert snapshot(tmp_path) == before
