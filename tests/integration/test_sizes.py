"""Wheel sizes: GPU code compressed by default and still read exactly (the example and a
many-unit fixture, against NVIDIA's cuobjdump), compression switched off per kernel, sizes in
the build summary, `factory inspect` and the browse data, the size gate, and a member over 4
GiB written with zip64 fields."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest

from factory.values.units import human_size
from factory.wheel.assemble import CoreMetadata, write_wheel
from factory.wheel.inspect import inspect_wheel

from ..support.checks import present
from ..support.factory import (
    EXAMPLE,
    Result,
    cache_env,
    listed_by_cuobjdump,
    one_cell_matrix,
    run_factory,
)
from ..support.plans import many_units_project as project
from ..support.system import debian_package

pytestmark = [pytest.mark.slow, pytest.mark.network]


def extracted_so(wheel: Path, folder: Path) -> Path:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".so")]
        archive.extract(name, folder)
    return folder / name


def assert_read_as_cuobjdump_lists(wheel: Path, cuobjdump: Path, folder: Path) -> dict[str, Any]:
    """The gates' SASS and PTX per SM are cuobjdump's, every entry is compressed, and the
    provenance records the bytes the shared object holds; the report's sizes."""
    report = inspect_wheel(wheel)
    extracted = listed_by_cuobjdump(cuobjdump, extracted_so(wheel, folder / "so"),
                                    folder / "cuobjdump")
    assert sorted(report.sass + report.ptx) == sorted(extracted)
    (so,) = report.shared_objects
    sizes = dict(so.gpu_sizes)
    assert sorted(sizes) == sorted(extracted)
    for code, size in sizes.items():
        assert size.compressed and size.stored < size.inflated, (code, size)
        extra = size.inflated - extracted[code]
        assert (0 < extra <= 8) if code.startswith("compute") else extra == 0, code
    assert present(report.provenance)["gpu_code_sizes"] == {
        code: [size.stored, size.inflated] for code, size in sizes.items()}
    return report.to_json()


def test_the_example_is_compressed_and_read_as_cuobjdump_lists_it(
        example_build: tuple[Path, Result], cuobjdump: Path, tmp_path: Path) -> None:
    out, result = example_build
    (wheel,) = (out / "files").glob("*.whl")
    report = assert_read_as_cuobjdump_lists(wheel, cuobjdump, tmp_path)
    assert report["provenance"]["cell"]["compress"] == "size"
    # sizes where a user decides: the build summary, inspect, the browse data
    installed = report["installed_size"]
    assert installed > report["size"]
    assert f"{human_size(report['size'])}, {human_size(installed)} installed" in result.stdout
    shown = run_factory("inspect", wheel).stdout
    assert f"{human_size(installed)} installed" in shown and "inflated)" in shown
    browse = json.loads((out / "browse" / "img2gray.json").read_text())
    (entry,) = [w for c in browse["versions"][0]["cells"] for w in c["wheels"]]
    assert entry["installed_size"] == installed and entry["size"] == report["size"]
    assert entry["gpu_code_sizes"] == report["provenance"]["gpu_code_sizes"]


def test_a_many_unit_kernel_is_compressed_and_read_as_cuobjdump_lists_it(tmp_path: Path,
        cuobjdump: Path, factory_cache: Path) -> None:
    project(tmp_path)  # the fixture of eight CUDA units and the binding, for sm_90
    result = run_factory("build", tmp_path / "matrix.yaml", "--out", tmp_path / "out",
                         env=cache_env(factory_cache))
    assert result.exit == 0, result.stdout + result.stderr
    (wheel,) = (tmp_path / "out" / "files").glob("*.whl")
    report = assert_read_as_cuobjdump_lists(wheel, cuobjdump, tmp_path)
    assert report["sass"] == ["sm_90"] and report["ptx"] == ["compute_90"]


def test_compression_is_switched_off_per_kernel_and_switching_rebuilds(tmp_path: Path,
        factory_cache: Path) -> None:
    out = tmp_path / "out"
    one_cell_matrix(tmp_path, EXAMPLE, entry="compress: none")
    result = run_factory("build", tmp_path / "matrix.yaml", "--out", out,
                         env=cache_env(factory_cache))
    assert result.exit == 0, result.stdout + result.stderr
    (wheel,) = (out / "files").glob("*.whl")
    report = inspect_wheel(wheel)
    assert present(report.provenance)["cell"]["compress"] == "none"
    assert all(not size.compressed and size.stored == size.inflated
               for so in report.shared_objects for _, size in so.gpu_sizes)
    # the default again: a new fingerprint, so the cell is built again (compressed, and so
    # refused as a changed file under a published name)
    one_cell_matrix(tmp_path, EXAMPLE)
    again = run_factory("build", tmp_path / "matrix.yaml", "--out", out,
                        env=cache_env(factory_cache))
    assert again.exit == 1 and "0 unchanged" in again.stdout
    assert "immutable: raise the kernel's version" in again.stdout


def test_a_wheel_over_the_limit_fails_its_cell_with_the_sizes_named(tmp_path: Path,
        factory_cache: Path) -> None:
    out = tmp_path / "out"
    one_cell_matrix(tmp_path, EXAMPLE, top="max-wheel-size: pypi")
    result = run_factory("build", tmp_path / "matrix.yaml", "--out", out,
                         "--max-wheel-size", "20K", env=cache_env(factory_cache))
    assert result.exit == 1
    (log,) = (out / "logs").glob("*.log")
    (line,) = [line for line in log.read_text().splitlines() if "gate failed: size:" in line]
    assert "installed), over the limit of 20.0 KiB; its GPU code: sm_90 " in line, line
    assert not list((out / "files").glob("*.whl"))
    # the matrix's own limit (PyPI's 100 MiB) lets it through
    assert run_factory("build", tmp_path / "matrix.yaml", "--out", out,
                       env=cache_env(factory_cache)).exit == 0


def test_a_member_over_4_gib_is_written_with_zip64_fields(tmp_path: Path) -> None:
    """A shared object past 4 GiB (a sparse file: no disk, no memory) is streamed into the
    wheel; Info-ZIP's unzip and Python's zipfile both read its size, and its bytes hash as
    RECORD says."""
    size = (4 << 30) + 123_456_789
    package = tmp_path / "content" / "big"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    with open(package / "_big.so", "wb") as handle:
        handle.truncate(size)
    wheel = write_wheel(tmp_path / "content", tmp_path / "dist",
                        CoreMetadata("big", "1.0", "a big wheel", ">=3.9", (), "MIT", None),
                        "py3-none-any", True, 1767225600)
    listing = subprocess.run([debian_package("unzip", "unzip"), "-l", wheel],
                             capture_output=True, text=True, check=True)
    assert f"{size}  " in listing.stdout, listing.stdout
    zeros, digest = hashlib.sha256(), hashlib.sha256()
    block = bytes(1 << 24)
    for start in range(0, size, len(block)):
        zeros.update(block[:min(len(block), size - start)])
    with zipfile.ZipFile(wheel) as archive:
        info = archive.getinfo("big/_big.so")
        assert info.file_size == size and info.compress_size < 1 << 30
        with archive.open(info) as member:
            while chunk := member.read(1 << 24):
                digest.update(chunk)
        record = archive.read("big-1.0.dist-info/RECORD").decode()
    assert digest.digest() == zeros.digest()
    expected = base64.urlsafe_b64encode(zeros.digest()).rstrip(b"=").decode()
    assert f"big/_big.so,sha256={expected},{size}" in record
