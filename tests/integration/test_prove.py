"""Proving wheels by running them: the import gate (a wheel loaded with a torch, its missing
symbols named, its ops and their torch.compile readiness read), `factory test` (the kernel's
own tests against its wheel), the import guard that names its index, and `factory doctor`."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from factory.prove.load import LoadReport, importable_modules, load_problems, load_wheel
from factory.prove.tests import INJECT, PLUGIN, _how_far
from factory.system.process import Log
from factory.wheel.assemble import CoreMetadata, relabelled, write_wheel
from factory.wheel.read import PROVENANCE_FILE

from ..support.checks import present
from ..support.factory import REPO, Result, cache_env, factory_main, run_factory, write
from ..support.installs import venv_python


def test_a_suite_stopped_at_its_limit_says_how_far_it_got(tmp_path: Path) -> None:
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
def test_the_import_gate_names_a_symbol_the_torch_lacks(tmp_path: Path, torch_venv: Path) -> None:
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
def test_a_built_wheel_that_calls_into_another_torch_is_not_published(tmp_path: Path,
        factory_cache: Path) -> None:
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
def test_torch_compile_readiness_agrees_with_fake_tensors(tmp_path: Path, torch_venv: Path) -> None:
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
def test_ops_that_modules_outside_the_wheel_register_are_not_the_wheels(tmp_path: Path,
        torch_venv: Path) -> None:
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
def test_the_example_passes_the_import_gate_and_records_its_op(
        example_build: tuple[Path, Result]) -> None:
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
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert re.search(rf"gated\s+sha256 {digest}, taken by cell img2gray-cu130torch211-x86_64 "
                     r"when it\s+packaged the wheel, before any of its code ran: these bytes",
                     shown.stdout), shown.stdout


@pytest.mark.slow
def test_inspect_names_a_published_wheel_whose_bytes_are_not_the_gated_ones(
        example_build: tuple[Path, Result], tmp_path: Path, torch_venv: Path) -> None:
    """A copy of the example's index whose wheel was changed after its build (a comment added
    to its zip: every member intact): inspect says it is not what was gated, and fails;
    --load-with imports it, confined."""
    out = shutil.copytree(example_build[0], tmp_path / "out", symlinks=True)
    wheel = next((out / "files").glob("*.whl"))
    with zipfile.ZipFile(wheel, "a") as archive:
        archive.comment = b"changed after it was gated"
    python = Path(torch_venv.name, "bin", "python")  # relative: the sandbox starts elsewhere
    shown = run_factory("inspect", "--json", wheel, "--load-with", python, cwd=torch_venv.parent)
    assert shown.exit == 1, shown.stdout + shown.stderr
    (report,) = json.loads(shown.stdout)["wheels"]
    assert report["gated"]["matches"] is False
    assert report["gated"]["cell"] == "img2gray-cu130torch211-x86_64"
    assert any(problem.startswith("its bytes are not the ones cell img2gray-cu130torch211-x86_64 "
                                  "gated (sha256 ") for problem in report["problems"]), report
    assert report["ops"]["seen"].startswith(f"loaded with {python} (torch 2.11."), report
    assert [op["name"].rsplit("::", 1)[1] for op in report["ops"]["ops"]] == ["img2gray"]


# ---- factory test ---------------------------------------------------------------------------

@pytest.mark.slow
def test_factory_test_runs_the_example_tests_against_its_wheel(example_build: tuple[Path, Result],
        example_tested: tuple[Path, Result], factory_cache: Path) -> None:
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
    strict = run_factory("test", example_build[0].parent / "matrix.yaml", "--out", out,
                         "--require-gpu", env=cache_env(factory_cache))
    assert strict.exit == 1 and "--require-gpu: some cells' tests ran with no GPU" in \
        strict.stdout


@pytest.mark.slow
def test_a_wheel_whose_tests_fail_is_not_published(tmp_path: Path, factory_cache: Path) -> None:
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
def test_the_chosen_tests_run_with_what_flake_nix_names_and_within_their_time(tmp_path: Path,
        factory_cache: Path) -> None:
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
                      .replace("timeout: 5m", "timeout: 60s"))  # torch's import, on a busy machine
    started = time.monotonic()
    hung = run_factory("test", "matrix.yaml", "--out", out, cwd=tmp_path, env=env)
    assert hung.exit == 1, hung.stdout + hung.stderr
    assert time.monotonic() - started < 300  # the test sleeps 900 s
    hung_log = (out / "logs" / "img2gray-cu130torch211-x86_64.tests.log").read_text()
    assert ("FAILED: the tests did not finish in 60 s: 1 of 2 ended (1 passed), "
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
def three_cells(example_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    out = tmp_path_factory.mktemp("doctor") / "index"
    (out / "files").mkdir(parents=True)
    shutil.copy(example_wheel, out / "files")
    another_cell(example_wheel, out, "cu130torch212", "2.12", "13.0")
    another_cell(example_wheel, out, "cu128torch210", "2.10", "12.8")
    assert run_factory("index", "--out", out).exit == 0
    process = subprocess.Popen([sys.executable, "-m", "factory", "serve", str(out), "--port",
                                "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    url = present(process.stdout).readline().split(" at ", 1)[1].split()[0]
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
def test_doctor_picks_the_cell_of_the_installed_torch(three_cells: str, torch_venv: Path,
                                                      factory_cache: Path) -> None:
    done = served_doctor(three_cells, torch_venv / "bin/python",
                         three_cells + "cu130torch211/simple/", "img2gray")
    assert done.returncode == 0, done.stdout + done.stderr
    index = f"{three_cells}cu130torch211/simple/"
    assert "torch      2.11.0+cu130, CUDA 13.0, cxx11 ABI" in done.stdout
    assert f"  pip install img2gray==1.0.0+cu130torch211 --extra-index-url {index}\n" \
        in done.stdout
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
def cpu_torch_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtual environment with a CPU-only torch, as pip on this machine finds one."""
    venv = tmp_path_factory.mktemp("cpu") / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    done = subprocess.run([venv / "bin/python", "-m", "pip", "install", "--quiet",
                           "torch==2.13.0+cpu"], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"no CPU-only torch wheel is reachable here: {done.stderr.strip()[-200:]}")
    return venv


@pytest.mark.slow
def test_doctor_explains_every_miss_for_a_cpu_only_torch(three_cells: str,
                                                         cpu_torch_venv: Path) -> None:
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


def test_bad_input_to_test_and_doctor_is_one_line(capsys: pytest.CaptureFixture[str],
                                                  tmp_path: Path) -> None:
    missing = factory_main("test", REPO / "matrix.yaml", "--out", tmp_path / "none",
                           capsys=capsys)
    assert missing.exit == 2 and "none" in missing.stdout + missing.stderr
    assert not (tmp_path / "none").exists()
    python = factory_main("doctor", "--python", tmp_path / "no-python", capsys=capsys)
    assert python.exit == 2
    assert len((python.stdout + python.stderr).strip().splitlines()) == 1


@pytest.mark.slow
def test_build_with_test_tests_what_it_built_or_kept(example_build: tuple[Path, Result],
                                                     tmp_path: Path, factory_cache: Path) -> None:
    out = shutil.copytree(example_build[0], tmp_path / "index", symlinks=True)
    result = run_factory("build", example_build[0].parent / "matrix.yaml", "--out", out,
                         "--test", env=cache_env(factory_cache))
    assert result.exit == 0, result.stdout + result.stderr
    assert "0 built, 1 unchanged" in result.stdout
    assert "8 passed, 0 failed, 6 skipped with no GPU" in result.stdout, result.stdout
    manifest = json.loads((out / ".factory" / "manifest.json").read_text())
    (cell,) = manifest["cells"].values()
    assert cell["tests"]["passed"] == 8 and cell["ops"][0]["fake"] is True
