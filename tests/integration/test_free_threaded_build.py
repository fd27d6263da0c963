"""Free-threaded cells built for real (torch 2.15 with CUDA 13.2, CPython 3.14t made from its
source release into the tests' cache the first time): the example's cp314t wheel passes every
gate, imports with the GIL kept disabled and passes its own tests there, and installs with uv
from its index into a fresh free-threaded environment, where its op runs and the GIL stays
disabled; a setup.py project whose pybind11 module turns the GIL back on fails the import gate,
saying so."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from playwright.sync_api import Browser

import json
import os
import re
import subprocess

import pytest
from uv import find_uv_bin

from ..support.browser import open_page, text
from ..support.factory import EXAMPLE, REPO, cache_env, run_factory, write
from ..support.installs import read_dist_info
from ..support.servers import serving

pytestmark = [pytest.mark.slow, pytest.mark.network, pytest.mark.root]


def test_the_example_gets_a_cp314t_wheel_that_keeps_the_gil_disabled(tmp_path: Path,
        factory_cache: Path, browser: Browser) -> None:
    matrix = write(tmp_path / "matrix.yaml", f"""
        kernels:
          - {{path: {EXAMPLE}, version: 1.0.0}}
          - {{path: {REPO / "examples" / "relu-scale"}, version: 1.0.0}}
        torch: ["2.15"]
        cuda: {{"13.2": {{sms: ["9.0"]}}}}
        python: ["3.14t"]
        runner: local
    """)
    out = tmp_path / "index"
    done = run_factory("build", matrix, "--out", out, "--test", "--select", "kernel=img2gray",
                       "--select", "kernel=relu-scale,python=3.14t", env=cache_env(factory_cache))
    assert done.exit == 1, done.stdout + done.stderr  # relu-scale's cell fails, as it should
    assert "img2gray/cu132torch215/x86_64: built" in done.stdout
    assert "img2gray/cu132torch215/x86_64/cp314t: built" in done.stdout
    assert re.search(r"relu-scale/cu132torch215/x86_64/cp314t: failed \(relu_scale-1\.0\.0\+"
                     r"cu132torch215-cp314-cp314t-manylinux_\d+_\d+_x86_64\.whl failed its import "
                     r"gate: import: loading relu_scale turned the GIL back on", done.stdout), \
        done.stdout
    assert not list((out / "files").glob("relu_scale-*"))

    (wheel,) = (out / "files").glob("img2gray-*-cp314-cp314t-*.whl")
    assert re.fullmatch(r"img2gray-1\.0\.0\+cu132torch215-cp314-cp314t-manylinux_\d+_\d+_"
                        r"x86_64\.whl", wheel.name)
    assert "Tag: cp314-cp314t-manylinux" in read_dist_info(wheel, "WHEEL")
    provenance = json.loads(read_dist_info(wheel, "provenance.json"))
    assert provenance["cell"]["python"] == "3.14t"
    log = (out / "logs" / "img2gray-cu132torch215-x86_64-cp314t.log").read_text()
    assert "-DPy_LIMITED_API" not in log and "free-threaded CPython: the GIL stayed disabled" in log
    assert re.search(r"kernel tests: proven: \d+ passed", log), log

    # its variant wheel beside the abi3 one's, under the same label: the installer picks by tag
    variants = run_factory("index", "--out", out, "--variants")
    assert variants.exit == 0, variants.stdout + variants.stderr
    listed = (out / "variants" / "torch215" / "simple" / "img2gray" / "index.html").read_text()
    assert re.search(r"img2gray-1\.0\.0-cp314-cp314t-manylinux_\d+_\d+_x86_64-cu132torch215\.whl",
                     listed) and "cp39-abi3" in listed, listed

    # as a user on CPython 3.14t installs it: uv, its cell's index, torch from PyPI
    python = next((factory_cache / "python").rglob("bin/python3.14t"), None) or "3.14t"
    venv = tmp_path / "try"
    env = {**os.environ, "UV_CACHE_DIR": str(factory_cache / "uv")}
    subprocess.run([find_uv_bin(), "venv", "--quiet", "--python", str(python), venv], check=True,
                   env=env)
    with serving(out) as url:
        subprocess.run([find_uv_bin(), "pip", "install", "--quiet", "--python",
                        venv / "bin" / "python", "img2gray", "--extra-index-url",
                        f"{url}cu132torch215/simple/", "--index-strategy", "unsafe-best-match"],
                       check=True, env=env)
        # the browse page says which CPythons load each of the cell's two wheels
        page, errors = open_page(browser, url + "#package=img2gray&torch=2.15&cuda=13.2")
        page.wait_for_selector("#facts .wheel")
        shown = [text(page, f"#facts .wheel >> nth={n}") for n in range(2)]
        assert errors == []
    assert any("free-threaded CPython 3.14t only (cp314t): it loads with the GIL disabled"
               in text for text in shown), shown
    assert any(">=3.9, with the GIL (abi3: a free-threaded CPython needs its own cpXYt wheel)"
               in text for text in shown), shown
    ran = subprocess.run([venv / "bin" / "python", "-c", (
        "import sys, torch, img2gray\n"
        "gray = img2gray.img2gray(torch.full((2, 3, 3), 100, dtype=torch.uint8))\n"
        "print(sys._is_gil_enabled(), gray.tolist())")], capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split(" ", 1)[0] == "False", ran.stdout
    assert ran.stdout.strip().endswith("[[100, 100, 100], [100, 100, 100]]"), ran.stdout


def test_a_free_threaded_cpython_nothing_here_gives_skips_its_cell(tmp_path: Path,
        factory_cache: Path) -> None:
    """Offline, with no 3.15t on the machine and none whose source the factory knows: the
    cp315t cell is skipped with that reason (the build succeeds), and the browse page keeps
    the label's built cell and says why the free-threaded one has no wheel."""
    matrix = write(tmp_path / "matrix.yaml", f"""
        kernels: [{{path: {EXAMPLE}, version: 1.0.0}}]
        torch: ["2.15"]
        cuda: {{"13.2": {{sms: ["9.0"]}}}}
        python: ["3.15t"]
        runner: local
    """)
    out = tmp_path / "index"
    done = run_factory("build", matrix, "--out", out, "--offline", env=cache_env(factory_cache))
    assert done.exit == 0, done.stdout + done.stderr
    assert "img2gray/cu132torch215/x86_64: built" in done.stdout
    reason = ("no free-threaded CPython 3.15t on this machine (offline, so uv does not install "
              "one)")
    assert "img2gray/cu132torch215/x86_64/cp315t: skipped" in done.stdout
    assert "1 built, 0 unchanged, 0 failed, 1 skipped" in done.stdout
    (release,) = json.loads((out / "browse" / "img2gray.json").read_text())["versions"]
    (cell,) = release["cells"]
    assert cell["status"] == "built" and len(cell["wheels"]) == 1
    (other,) = cell["others"]
    assert other["status"] == "skipped" and other["detail"].startswith(reason), other
