"""Wheel variants end to end: the example built for two SM sets with `variants: true`, merged,
served, and installed by real uv with its wheel-variants preview, which picks the build for
the machine (its NVIDIA provider's values fixed by uv's override variables, as this machine has
no GPU) and refuses a machine neither build can run on."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from playwright.sync_api import Browser

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from variantlib.variant_dist_info import VariantDistInfo
from variantlib.variants_json import VariantsJson

from factory import doctor

from ..support.browser import open_page, shot, text
from ..support.factory import EXAMPLE, cache_env, run_factory
from ..support.servers import serving, static_server

pytestmark = [pytest.mark.slow]

SM90 = "img2gray-1.0.0-cp39-abi3-manylinux_2_34_x86_64-cu130torch211.whl"
SM80 = "img2gray-1.0.0-cp39-abi3-manylinux_2_34_x86_64-cu130torch211sm80.whl"


def two_sm_matrix(folder: Path, sm: str, label: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "matrix.yaml"
    path.write_text(f"kernels:\n  - path: {EXAMPLE}\n    version: 1.0.0\n"
                    f'torch: ["2.11"]\ncuda:\n  "13.0":\n    sms: ["{sm}"]\nrunner: local\n'
                    f"variants: true\n{label}")
    return path


@pytest.fixture(scope="module")
def variant_site(tmp_path_factory: pytest.TempPathFactory, factory_cache: Path) -> tuple[Path, Any]:
    """Two builds of the example, sm_90 (label cu130torch211) and sm_80 (cu130torch211sm80),
    each with `variants: true`, merged into one site by `factory index --merge`."""
    root = tmp_path_factory.mktemp("variants")
    outs = []
    for sm, label in (("9.0", ""), ("8.0", 'label: "cu{cuda}torch{torch}sm80"\n')):
        out = root / f"out-{sm}"
        built = run_factory("build", two_sm_matrix(root / sm, sm, label), "--out", out,
                            env=cache_env(factory_cache))
        assert built.exit == 0, built.stdout + built.stderr
        outs.append(out)
    merged = root / "site"
    done = run_factory("index", "--out", merged, "--merge", *outs)
    assert done.exit == 0, done.stdout + done.stderr
    return merged, outs


def test_each_cell_wheel_is_published_again_as_a_variant_wheel(
        variant_site: tuple[Path, Any]) -> None:
    site, (out90, _) = variant_site
    files = sorted(path.name for path in (site / "files").glob("*.whl"))
    assert files == ["img2gray-1.0.0+cu130torch211-cp39-abi3-manylinux_2_34_x86_64.whl",
                     "img2gray-1.0.0+cu130torch211sm80-cp39-abi3-manylinux_2_34_x86_64.whl",
                     SM90, SM80]
    # the same binaries: every member but the .dist-info's is byte for byte the cell wheel's
    for labelled, variant in zip(files[:2], files[2:], strict=True):
        with zipfile.ZipFile(site / "files" / labelled) as a, \
                zipfile.ZipFile(site / "files" / variant) as b:
            ours = {n: a.read(n) for n in a.namelist() if ".dist-info/" not in n}
            theirs = {n: b.read(n) for n in b.namelist() if ".dist-info/" not in n}
            assert ours == theirs and any(n.endswith(".so") for n in ours)
            names = b.namelist()
            assert "img2gray-1.0.0.dist-info/variant.json" in names
            metadata = b.read("img2gray-1.0.0.dist-info/METADATA").decode()
            assert "\nVersion: 1.0.0\n" in metadata and "Requires-Dist: torch==2.11.*" in metadata
            # variantlib accepts each wheel's variant metadata for its label
            label = variant.removesuffix(".whl").rsplit("-", 1)[1]
            VariantDistInfo(b.read("img2gray-1.0.0.dist-info/variant.json"),
                            expected_label=label)
    # one variants index for torch 2.11, listing both variants and the release's variants.json
    page = site / "variants" / "torch211" / "simple" / "img2gray"
    document = json.loads((page / "img2gray-1.0.0-variants.json").read_text())
    VariantsJson(document)
    assert document["$schema"] == "https://variants-schema.wheelnext.dev/peps/825/v0.1.1.json"
    assert document["variants"] == {
        "cu130torch211": {"nvidia": {"cuda_version_lower_bound": ["13.0"],
                                     "sm_arch": ["90_real", "90_virtual"]}},
        "cu130torch211sm80": {"nvidia": {"cuda_version_lower_bound": ["13.0"],
                                         "sm_arch": ["80_real", "80_virtual"]}}}
    digest = hashlib.sha256((page / "img2gray-1.0.0-variants.json").read_bytes()).hexdigest()
    listed = json.loads((page / "index.json").read_text())["files"]
    assert [entry["filename"] for entry in listed] == [SM90, SM80,
                                                       "img2gray-1.0.0-variants.json"]
    assert listed[2]["hashes"] == {"sha256": digest} and listed[2]["url"] == \
        "img2gray-1.0.0-variants.json"
    assert f'href="img2gray-1.0.0-variants.json#sha256={digest}"' in \
        (page / "index.html").read_text()
    # the combined index has them too (a merge of the published site keeps them); the cells'
    # indexes have their own wheels only
    combined = (site / "simple" / "img2gray" / "index.html").read_text()
    assert SM90 in combined and "img2gray-1.0.0-variants.json" in combined
    cell = (site / "cu130torch211" / "simple" / "img2gray" / "index.html").read_text()
    assert SM90 not in cell and "variants.json" not in cell
    # a build's own output is an index of its one variant
    alone = json.loads((out90 / "variants/torch211/simple/img2gray/img2gray-1.0.0-variants.json"
                        ).read_text())
    assert list(alone["variants"]) == ["cu130torch211"]
    verified = run_factory("index", "--out", site, "--verify")
    assert verified.exit == 0 and "every byte matches" in verified.stdout, verified.stdout


def install_variant(index: str, tmp_path: Path, cache: Path, sm: str,
                    driver: str = "13.0") -> tuple[subprocess.CompletedProcess[str], str | None]:
    """uv, with its NVIDIA provider told the GPU and driver, installs img2gray from `index`
    into a fresh environment: what it said, and the variant label it installed."""
    from uv import find_uv_bin

    venv = tmp_path / f"venv-{sm}-{driver}"
    env = {**os.environ, "UV_CACHE_DIR": str(cache / "uv"),
           "NV_VARIANT_PROVIDER_FORCE_SM_ARCH": sm,
           "NV_VARIANT_PROVIDER_FORCE_CUDA_DRIVER_VERSION": driver}
    subprocess.run([find_uv_bin(), "venv", "--quiet", "--python", sys.executable, venv],
                   check=True, env=env)
    # torch is not installed: the variant chosen is the point, and its wheel holds the proof
    done = subprocess.run([find_uv_bin(), "pip", "install", "--python", venv / "bin/python",
                           "--preview-features", "wheel-variants", "--no-deps",
                           "--index-url", index, "img2gray"],
                          capture_output=True, text=True, env=env)
    found = list(venv.glob("lib/python*/site-packages/img2gray-1.0.0.dist-info/variant.json"))
    label = next(iter(json.loads(found[0].read_text())["variants"])) if found else None
    return done, label


def test_uv_installs_the_variant_that_fits_and_refuses_a_machine_none_fits(
        variant_site: tuple[Path, Any], tmp_path: Path, factory_cache: Path) -> None:
    site, _ = variant_site
    log: list[str] = []
    # PEP 691 JSON from `factory serve`, and PEP 503 HTML from a plain file server
    with serving(site) as served, static_server(site, log) as static:
        for url in (served, static):
            index = f"{url}variants/torch211/simple/"
            for sm, expected in (("9.0", "cu130torch211"), ("8.6", "cu130torch211sm80"),
                                 ("8.0", "cu130torch211sm80")):
                done, label = install_variant(index, tmp_path / url[-6:-1], factory_cache, sm)
                assert done.returncode == 0 and label == expected, (sm, done.stderr)
            for sm, driver in (("7.5", "13.0"), ("12.0", "13.0"), ("9.0", "12.8")):
                done, label = install_variant(index, tmp_path / url[-6:-1], factory_cache, sm,
                                              driver)
                assert done.returncode != 0 and label is None, (sm, driver, done.stderr)
                assert "img2gray==1.0.0 has only unsupported wheel variants" in done.stderr
        # a merge of the published site keeps the variant wheels (the combined index lists
        # them) and makes the variants index again
        again = tmp_path / "from-the-web"
        merged = run_factory("index", "--out", again, "--merge", served)
        assert merged.exit == 0, merged.stdout + merged.stderr
        assert f"variants in {again}/variants/torch211/simple/" in " ".join(
            merged.stdout.split())
        assert (again / "files" / SM80).read_bytes() == (site / "files" / SM80).read_bytes()
        assert (again / "variants/torch211/simple/img2gray/img2gray-1.0.0-variants.json"
                ).read_bytes() == (site / "variants/torch211/simple/img2gray/"
                                   "img2gray-1.0.0-variants.json").read_bytes()
    assert "/variants/torch211/simple/img2gray/img2gray-1.0.0-variants.json" in log
    # installers that read no variants (pip, uv without the preview) read the combined index
    # as before
    target = tmp_path / "pip-target"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--target",
                           target, "--index-url", f"file://{site}/simple/",
                           "img2gray==1.0.0+cu130torch211"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert [p.name for p in target.glob("*.dist-info")] == [
        "img2gray-1.0.0+cu130torch211.dist-info"]
    from uv import find_uv_bin

    target = tmp_path / "uv-target"
    done = subprocess.run([find_uv_bin(), "pip", "install", "--no-deps", "--target", target,
                           "--python", sys.executable, "--index-url", f"file://{site}/simple/",
                           "img2gray==1.0.0+cu130torch211sm80"], capture_output=True, text=True,
                          env={**os.environ, "UV_CACHE_DIR": str(factory_cache / "uv")})
    assert done.returncode == 0, done.stderr
    assert [p.name for p in target.glob("*.dist-info")] == [
        "img2gray-1.0.0+cu130torch211sm80.dist-info"]


def test_index_variants_makes_the_same_bytes_and_verify_rebuilds_one(
        variant_site: tuple[Path, Any], tmp_path: Path, factory_cache: Path) -> None:
    site, (out90, _) = variant_site
    fresh = tmp_path / "fresh"
    (fresh / "files").mkdir(parents=True)
    labelled = "img2gray-1.0.0+cu130torch211-cp39-abi3-manylinux_2_34_x86_64.whl"
    shutil.copy(site / "files" / labelled, fresh / "files")
    done = run_factory("index", "--out", fresh, "--variants")
    assert done.exit == 0, done.stdout + done.stderr
    assert (fresh / "files" / SM90).read_bytes() == (out90 / "files" / SM90).read_bytes()
    assert (fresh / "variants/torch211/simple/img2gray/img2gray-1.0.0-variants.json").is_file()
    again = run_factory("index", "--out", fresh, "--variants")
    assert again.exit == 0 and "0 page(s) written" in " ".join(again.stdout.split())
    inspected = run_factory("inspect", site / "files" / SM80)
    assert inspected.exit == 0, inspected.stdout + inspected.stderr
    assert "cu130torch211sm80 (PEP 825): nvidia :: cuda_version_lower_bound :: 13.0, nvidia " \
           ":: sm_arch :: 80_real, nvidia :: sm_arch :: 80_virtual" in \
           " ".join(inspected.stdout.split())
    assert "abi3 3.9 ok" in inspected.stdout
    # the variant wheel is its cell's wheel re-issued: made again from a rebuild of that cell
    verified = run_factory("verify", site / "files" / SM80, env=cache_env(factory_cache))
    assert verified.exit == 0, verified.stdout + verified.stderr


def test_doctor_and_browse_page_name_the_variants_index(variant_site: tuple[Path, Any],
                                                        browser: Browser) -> None:
    site, _ = variant_site
    facts = {"python": "3.12.3", "implementation": "cpython", "abi": "cp312",
             "platform": "linux", "machine": "x86_64", "glibc": "2.39",
             "torch": {"version": "2.11.0+cu130", "cuda": "13.0", "cxx11_abi": True},
             "driver": {"cuda": "13.0", "gpus": [{"name": "NVIDIA A100", "sm": "8.0"}]}}
    with serving(site) as url:
        (result,) = doctor.diagnose(url, "img2gray", facts)
        fits = result["fits"]
        assert fits["wheel"] == \
            "img2gray-1.0.0+cu130torch211sm80-cp39-abi3-manylinux_2_34_x86_64.whl"
        assert fits["variants"]["uv"] == (f"uv pip install img2gray --index {url}variants/"
                                          "torch211/simple/ --preview-features wheel-variants")
        page, errors = open_page(browser, url)
        page.select_option("#package", "img2gray")
        page.select_option("#torch", "2.11")
        page.select_option("#cuda", "13.0")
        page.wait_for_selector("#variants-command")
        assert text(page, "#variants-command") == fits["variants"]["uv"]
        facts_text = " ".join(text(page, "#facts").split())
        assert "variant cu130torch211" in facts_text and SM90 in facts_text
        assert "nvidia :: sm_arch :: 90_real" in facts_text
        shot(page, "browse-variants")
        assert errors == []
