"""cuTile-Python projects built for real: the shipped example (examples/tile-add) and a
second kernel written for the suite (tests/fixtures/tile-rmsnorm) compiled ahead of time by
cuda-tile's own compiler and tileiras from PyPI for four SMs, held to the cubin gate, imported
by the import gate, rebuilt byte for byte from provenance by `factory verify`; the cells
cuTile cannot serve skipped with their reason, and a declaration cuTile refuses stopping its
cell with one line."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest

from factory.wheel.inspect import inspect_wheel

from ..support.factory import REPO, cache_env, run_factory, write
from ..support.installs import read_dist_info

pytestmark = [pytest.mark.slow, pytest.mark.network]

EXAMPLE = REPO / "examples" / "tile-add"
RMSNORM = REPO / "tests" / "fixtures" / "tile-rmsnorm"
SMS = ("sm_80", "sm_90", "sm_100", "sm_120")


def test_cutile_kernels_ship_a_cubin_per_sm_and_signature(tmp_path: Path,
                                                          factory_cache: Path) -> None:
    write(tmp_path / "matrix.yaml", f"""
        kernels:
          - {{path: {EXAMPLE}}}
          - {{path: {RMSNORM}}}
        torch: ["2.11"]
        cuda: {{"13.0": {{sms: ["8.0", "9.0", "10.0", "12.0"]}}}}
    """)
    result = run_factory("build", "matrix.yaml", cwd=tmp_path, env=cache_env(factory_cache))
    assert result.exit == 0, result.stdout + result.stderr
    wheels = {w.name.split("-")[0]: w for w in (tmp_path / "index" / "files").glob("*.whl")}
    assert sorted(wheels) == ["tile_add", "tile_rmsnorm"]
    assert wheels["tile_add"].name == ("tile_add-1.0.0+cu130torch211-py3-none-manylinux_2_17_"
                                       "x86_64.manylinux2014_x86_64.whl")
    for name, signatures in (("tile_add", 6), ("tile_rmsnorm", 12)):
        report = inspect_wheel(wheels[name])
        assert not report.shared_objects
        (package, manifest), = report.cutile
        assert package == name and manifest["sms"] == list(SMS)
        (entries,) = manifest["kernels"].values()
        assert len(entries) == signatures
        by_path = {cubin.path: cubin.sm for cubin in report.cubins}
        for entry in entries:
            assert sorted(entry["cubins"]) == sorted(SMS)
            for sm, path in entry["cubins"].items():
                assert by_path[f"{name}/_kwf_cutile/{path}"] == sm  # the ELF header says so
            assert f"{name}/_kwf_cutile/{entry['tileir']}" in report.files
        assert f"{name}/_kernel_wheel_factory_cutile.py" in report.files
        assert not [f for f in report.files if "__pycache__" in f]
        requires = [line for line in read_dist_info(wheels[name], "METADATA").splitlines()
                    if line.startswith("Requires-Dist")]
        assert "Requires-Dist: torch==2.11.*" in requires
        assert any(line.startswith("Requires-Dist: cuda-tile>=1.7.") and line.endswith(",<1.8")
                   for line in requires), requires
        provenance = json.loads(read_dist_info(wheels[name], "provenance.json"))
        assert provenance["toolchain"]["cuda_tile"].startswith("1.7.")
        assert "tileiras" in provenance["toolchain"]
    with zipfile.ZipFile(wheels["tile_add"]) as archive:
        init = archive.read("tile_add/__init__.py").decode()
    assert init.splitlines()[1] == ("from . import _kernel_wheel_factory_cutile  # noqa: F401  "
                                    "(kernel-wheel-factory)")
    log = (tmp_path / "index" / "logs" / "tile-add-cu130torch211-x86_64.log").read_text()
    assert "cubins: sm_80 6, sm_90 6, sm_100 6, sm_120 6" in log
    assert "op tile_add::add: kernels for" in log and "torch.compile can trace it" in log

    # rebuilt from its provenance alone, byte for byte
    result = run_factory("verify", wheels["tile_add"], "--source", EXAMPLE, cwd=tmp_path,
                         env=cache_env(factory_cache))
    assert result.exit == 0, result.stdout + result.stderr
    assert "verified: the rebuilt wheel is byte-identical" in result.stdout


def test_cells_cutile_cannot_serve_are_skipped_and_a_refused_signature_stops_one(
        tmp_path: Path, factory_cache: Path) -> None:
    broken = shutil.copytree(RMSNORM, tmp_path / "broken")
    pyproject = broken / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('name = "tile-rmsnorm"',
                                                       'name = "tile-broken"')
                         .replace("{constant = 1e-6}", "{array = \"dtype\", ndim = 1}"))
    write(tmp_path / "matrix.yaml", f"""
        kernels:
          - {{path: {EXAMPLE}}}
          - {{path: broken}}
        torch: ["2.11"]
        cuda: {{"13.0": {{sms: ["7.5", "9.0"]}}}}
    """)
    result = run_factory("build", "matrix.yaml", cwd=tmp_path, env=cache_env(factory_cache))
    assert result.exit == 1
    assert "tile-broken/cu130torch211/x86_64" in result.stdout
    assert "does not compile: Invalid kernel parameter 'eps'" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr
    names = sorted(w.name.split("-")[0] for w in (tmp_path / "index" / "files").glob("*.whl"))
    assert names == ["tile_add"]  # the broken cell publishes nothing, the other goes out
    (wheel,) = (tmp_path / "index" / "files").glob("tile_add-*.whl")
    assert {c.sm for c in inspect_wheel(wheel).cubins} == {"sm_90"}  # 7.5: not cuTile's

    write(tmp_path / "old" / "matrix.yaml", f"""
        kernels: [{{path: {EXAMPLE}}}]
        torch: ["2.11"]
        cuda: {{"13.0": {{sms: ["7.5"]}}}}
    """)
    result = run_factory("plan", "matrix.yaml", cwd=tmp_path / "old",
                         env=cache_env(factory_cache))
    assert result.exit == 0, result.stdout + result.stderr
    assert "cuTile compiles for compute capability 8.0 and newer" in result.stdout
