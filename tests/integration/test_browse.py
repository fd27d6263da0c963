"""The browse page in a real browser: Debian's Chromium driven by playwright, on the example's
index served by `factory serve`, at a phone's width."""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from factory.prove.tests import TestReport
from factory.wheel.read import read_wheel

from ..support.browser import open_page, shot, text
from ..support.checks import present
from ..support.factory import Result, run_factory
from ..support.servers import serving
from ..support.wheels import GPU_FACTS

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

pytestmark = [pytest.mark.slow, pytest.mark.root, pytest.mark.network]


@pytest.fixture(scope="module")
def site(example_tested: tuple[Path, Result]) -> Iterator[str]:
    with serving(example_tested[0]) as url:
        yield url


def test_the_helper_gives_the_cell_index_command_and_shows_its_wheel(browser: Browser, site: str,
        example_tested: tuple[Path, Result]) -> None:
    page, errors = open_page(browser, site)
    page.select_option("#package", "img2gray")
    page.select_option("#torch", "2.11")
    page.select_option("#cuda", "13.0")
    expected = f"{site}cu130torch211/simple/"
    # pinned to the labelled version, which no project of PyPI can have
    assert text(page, "#pip-command") == \
        f"pip install img2gray==1.0.0+cu130torch211 --extra-index-url {expected}"
    # uv's form is the one doctor prints
    assert text(page, "#uv-command") == f"uv pip install img2gray --index {expected}"
    assert "img2gray 1.0.0+cu130torch211" in text(page, "#status")
    assert page.evaluate("location.hash") == "#package=img2gray&torch=2.11&cuda=13.0"
    # The chosen cell's facts are shown with its commands: no click needed.
    page.wait_for_selector("#facts .wheel")
    details = text(page, "#facts .wheel")
    assert "sm_90" in details and "==2.11.*" in details
    assert "Python>=3.9, with the GIL (abi3: a free-threaded CPython needs its own cpXYt wheel)" \
        in details, details
    assert " installed)" in details and " inflated)" in details, details  # sizes, per SM too
    assert "examples/img2gray" in details and "nvcc 13.0" in details
    # sizes in binary units, as the factory prints them everywhere
    assert "KiB" in details and " kB" not in details and " MB" not in details, details
    # uploaded: when the wheel entered the index (its file's time in files/), not its source's
    (wheel,) = (example_tested[0] / "files").glob("*.whl")
    entered = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime(wheel.stat().st_mtime))
    assert f"uploaded{entered}" in details, details
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert f"sha256{digest} (gated: taken when it was packaged, before any of its code ran)" \
        in details, details
    assert "attestedno: published where no CI identity could sign it" in details, details
    built = read_wheel(wheel).record
    assert built is not None and entered != time.strftime(
        "%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime(built.build.source_date_epoch))
    proof = text(page, "#facts .proof")
    assert "8 passed, 0 failed, 6 skipped with no GPU (GPU tests skipped)" in proof, proof
    assert "verdictproven: its own tests passed" in proof, proof
    assert "::img2gray (CPU, CUDA, Meta): torch.compile ready" in proof, proof
    # The grid marks the chosen cell; its button chooses it too.
    page.wait_for_selector("td.built.selected button")
    page.click("td.built button")
    assert text(page, "#pip-command").endswith("/cu130torch211/simple/")
    # Nothing wider than the phone's screen.
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    shot(page, "browse-page")
    favicon = page.request.get(f"{site}favicon.svg")
    assert favicon.status == 200 and favicon.headers["content-type"] == "image/svg+xml"
    assert page.evaluate("document.querySelector('link[rel=icon]').href") == f"{site}favicon.svg"
    assert errors == []


def test_a_deep_link_selects_and_shows_and_detect_clears_what_no_longer_applies(browser: Browser,
        site: str) -> None:
    page, errors = open_page(browser, site + "#package=img2gray&torch=2.11&cuda=13.0")
    assert page.input_value("#torch") == "2.11" and page.input_value("#cuda") == "13.0"
    assert text(page, "#pip-command").endswith("/cu130torch211/simple/")
    # the link shows: the wheel's facts, the package's card open, its cell marked
    page.wait_for_selector("#facts .proof")
    assert "torch 2.11, CUDA 13.0" in text(page, "#facts h3")
    assert page.evaluate("document.getElementById('pkg-img2gray').open")
    page.wait_for_selector("#pkg-img2gray td.selected[aria-current=true]")
    shot(page, "browse-deep-link")
    page.click("#detect summary")
    page.fill("#paste", "2.11.0+cu130 13.0")
    assert text(page, "#paste-result") == "Found torch 2.11 with CUDA 13.0."
    # a torch with no index here: the commands and facts of the earlier choice go
    page.fill("#paste", "2.12.0+cu130 13.0")
    assert "no index here for that pair yet" in text(page, "#paste-result")
    assert text(page, "#pip-command") == "" and text(page, "#uv-command") == ""
    assert text(page, "#status") == "No index here for torch 2.12 with CUDA 13.0."
    assert page.locator("#facts *").count() == 0
    assert page.locator("td.selected").count() == 0
    shot(page, "browse-detect-none")
    page.fill("#paste", "2.13.0+cpu None")
    assert "need a CUDA build of torch" in text(page, "#paste-result")
    assert text(page, "#pip-command") == ""
    page.fill("#paste", "2.11.0+cu130 13.0")
    page.wait_for_selector("#facts .wheel")
    assert text(page, "#pip-command").endswith("/cu130torch211/simple/")
    assert errors == []


def edited_index(example_tested: tuple[Path, Result], tmp_path: Path,
                 edit: Callable[[dict[str, Any]], None]) -> Path:
    """A copy of the example's output folder whose cell records `edit` changed, indexed
    again."""
    out = shutil.copytree(example_tested[0], tmp_path / "index", symlinks=True)
    manifest_path = out / ".factory" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    edit(manifest["cells"])
    manifest_path.write_text(json.dumps(manifest))
    assert run_factory("index", "--out", out).exit == 0
    return out


def shown_proof(browser: Browser, url: str) -> tuple[Page, list[str], str]:
    """The page of the example's cell, its errors and the text of its proof."""
    page, errors = open_page(browser, url + "#package=img2gray&torch=2.11&cuda=13.0")
    page.wait_for_selector("#facts .proof")
    return page, errors, text(page, "#facts .proof")


def test_what_the_index_records_is_shown_as_text_never_run(browser: Browser,
                                                           example_tested: tuple[Path, Result],
                                                           tmp_path: Path) -> None:
    """The browse page takes every value of its data as text: markup in a cell's recorded
    test choice, op name or reason (a hostile matrix or kernel could put it there) is shown,
    never parsed, and nothing runs; the chosen tests are shown beside the counts."""
    hostile = '<img src=x onerror="window.pwned=1">'

    def edit(cells: dict[str, Any]) -> None:
        for cell in cells.values():
            if cell.get("tests"):
                cell["tests"]["selection"] = f"test_a.py -k '{hostile}'"
                cell["ops"][0]["name"] = f"img2gray::{hostile}"

    with serving(edited_index(example_tested, tmp_path, edit)) as url:
        page, errors, proof = shown_proof(browser, url)
        assert f"6 skipped with no GPU (GPU tests skipped) (chosen: test_a.py -k '{hostile}')" \
            in proof, proof
        assert f"img2gray::{hostile}" in proof
        assert page.locator("img").count() == 0
        assert page.evaluate("window.pwned") is None
        assert errors == []


def test_every_missing_cell_says_why(browser: Browser, example_tested: tuple[Path, Result],
                                     tmp_path: Path) -> None:
    """A cell the build skipped gives its reason, a failed one its error, and a torch x CUDA
    pair the matrix never listed says it was not requested, in the grid and in the helper."""
    def edit(cells: dict[str, Any]) -> None:
        built = cells["img2gray/cu130torch211/x86_64"]
        for label, torch, cuda, status, detail in (
                ("cu130torch212", "2.12", "13.0", "skipped", "the kernel's torch maxver is 2.11"),
                ("cu128torch211", "2.11", "12.8", "failed", "nvcc: out of memory")):
            cell = f"img2gray/{label}/x86_64"
            cells[cell] = {**built, "cell": cell, "label": label, "torch": torch, "cuda": cuda,
                           "status": status, "detail": detail, "wheel": None, "ops": None,
                           "tests": None}

    with serving(edited_index(example_tested, tmp_path, edit)) as url:
        page, errors = open_page(browser, url + "#package=img2gray&torch=2.12&cuda=12.8")
        page.wait_for_selector("td.none")
        cells = {(td.get_attribute("data-torch"), td.get_attribute("data-cuda")):
                 (td.text_content(), present(td.query_selector("small")).text_content())
                 for td in page.query_selector_all("table.grid td")}
        assert cells == {("2.11", "13.0"): ("builtcu130torch211", "cu130torch211"),
                         ("2.11", "12.8"): ("failednvcc: out of memory", "nvcc: out of memory"),
                         ("2.12", "13.0"): ("skippedthe kernel's torch maxver is 2.11",
                                            "the kernel's torch maxver is 2.11"),
                         ("2.12", "12.8"): ("not requestednot in the matrix",
                                            "not in the matrix")}, cells
        assert text(page, "#status") == (
            "No img2gray wheel for torch 2.12 with CUDA 12.8 (not requested: the matrix has "
            "no such cell; its maintainers can add it, or build it on request).")
        page.select_option("#cuda", "13.0")
        assert "(skipped: the kernel's torch maxver is 2.11)" in text(page, "#status")
        assert text(page, "#pip-command") == ""
        shot(page, "browse-missing-cells")
        assert errors == []


def test_the_verdict_of_the_kernels_own_tests_is_shown_with_its_reason(browser: Browser,
        example_tested: tuple[Path, Result], tmp_path: Path) -> None:
    """A published wheel its tests could not prove says untested and why; a cell held back
    because its tests are required says so in the grid."""
    reason = "pytest cannot be had offline: uv's cache does not hold it"

    def edit(cells: dict[str, Any]) -> None:
        built = cells["img2gray/cu130torch211/x86_64"]
        built["tests"] = TestReport.untested(reason, "2.11.0").to_json()
        held = "img2gray/cu130torch212/x86_64"
        cells[held] = {**built, "cell": held, "label": "cu130torch212", "torch": "2.12",
                       "status": "untested", "wheel": None, "ops": None,
                       "detail": f"not published: its tests could not run ({reason}), and "
                                 "tests are required"}

    with serving(edited_index(example_tested, tmp_path, edit)) as url:
        page, errors, proof = shown_proof(browser, url)
        assert f"verdictuntested: {reason}" in proof, proof
        assert f"kernel testsnot run: {reason}" in proof, proof
        shot(page, "browse-untested")
        held_cell = page.locator("td.untested")
        assert held_cell.count() == 1
        assert present(held_cell.text_content()).startswith(
            "untestednot published: its tests could not run")
        assert errors == []


@pytest.fixture(scope="module")
def stable_site(stable_build: tuple[Path, Result]) -> Iterator[str]:
    with serving(stable_build[0]) as url:
        yield url


def test_a_stable_abi_wheel_shows_every_cell_it_serves(browser: Browser, stable_site: str) -> None:
    """One wheel in three cells: each cell says so, the wheel names the cells it serves, and
    the helper gives the index of the chosen torch."""
    page, errors = open_page(browser, stable_site + "#package=stable-kernel&torch=2.13&cuda=13.0")
    assert text(page, "#pip-command") == (
        f"pip install stable-kernel==1.0.0+cu13.stable.torch2.11 --extra-index-url "
        f"{stable_site}cu130torch213/simple/")
    assert text(page, "#status") == (
        "stable-kernel 1.0.0+cu13.stable.torch2.11, a stable-ABI wheel for torch >=2.11, "
        "serves torch 2.13 with CUDA 13.0:")
    page.wait_for_selector("td.built.stable button")
    cells = page.query_selector_all("td.built.stable")
    assert [cell.text_content() for cell in cells] == [
        f"builtcu130torch21{minor}, stable-ABI wheel" for minor in (3, 2, 1)]
    present(cells[0].query_selector("button")).click()
    details = text(page, "#facts .wheel")
    assert "built against torch's stable ABI 2.11: one wheel for torch >=2.11" in details
    assert ("serves" "torch 2.11 with CUDA 13.0 (cu130torch211), torch 2.12 with CUDA 13.0 "
            "(cu130torch212), torch 2.13 with CUDA 13.0 (cu130torch213)") in details, details
    assert "stable-kernel/cu13.stable.torch2.11/x86_64, the stable-ABI build" in \
        text(page, "#facts .proof")
    assert errors == []


def test_the_doctor_reads_every_field_of_the_browse_data_as_the_index_writes_it(
        example_tested: tuple[Path, Result]) -> None:
    """doctor.py is served alone and imports nothing of the factory, so it keeps a reader of
    its own of what index/browse.py writes: held to the writer field by field, so that a field
    renamed or reshaped on one side fails here, not on a user's machine."""
    from factory import doctor

    out = example_tested[0]
    browse = json.loads((out / "browse.json").read_text())
    seen = {"cells": 0, "wheels": 0, "tests": 0}
    for entry in browse["packages"]:
        data = json.loads((out / "browse" / f"{entry['project']}.json").read_text())
        for release in data["versions"]:
            for cell in release["cells"]:
                read = doctor._clean_cell(cell)
                assert read["cuda"] == cell["cuda"] and read["torch"] == cell["torch"] and \
                    read["label"] == cell["label"]
                for written, wheel in zip(cell["wheels"], read["wheels"], strict=True):
                    assert wheel == {key: written[key] for key in wheel}
                    seen["wheels"] += 1
                if cell["tests"] is not None:  # read as the writer's own codec reads it
                    report = present(TestReport.from_json(cell["tests"]))
                    assert read["tests"] == {"verdict": report.verdict, "passed": report.passed,
                                             "reason": report.reason or "",
                                             "gpus": list(report.gpus)}
                    seen["tests"] += 1
                seen["cells"] += 1
            for written in release["anywhere"]:
                wheel = doctor._clean_wheel(written)
                tests = wheel.pop("tests")  # what its build's tests said, read as for a cell
                assert wheel == {key: written[key] for key in wheel}
                assert tests == (doctor._clean_tests(written["tests"])
                                 if written["tests"] is not None else None)
    assert min(seen.values()) >= 1, seen  # a cell with its wheel and its tests' verdict
    (result,) = doctor.diagnose(out.as_uri() + "/", "img2gray", GPU_FACTS)  # torch 2.11, H100
    assert result["fits"] is not None and "+cu130torch211 --extra-index-url" in \
        result["fits"]["pip"], result
