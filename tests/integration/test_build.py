"""Real builds: nvcc from PyPI, torch from PyPI, auditwheel, pip. Minutes, not seconds.

The shipped example is built exactly as README.md says (the newest torch, as matrix.lock pins
it), and for the tests' torch 2.11, whose wheel is installed with pip into a fresh virtual
environment holding torch 2.11 and run there. The multi-kernel fixture's shared object is read
with NVIDIA's cuobjdump to check each kernel's SASS and PTX.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.utils import parse_wheel_filename
from uv import find_uv_bin

from factory.wheel.fatbin import fatbin_entries

from ..support.checks import present
from ..support.factory import (
    EXAMPLE,
    EXAMPLE_WHEEL,
    FIXTURES,
    REPO,
    Result,
    cache_env,
    root_label,
    run_factory,
    write,
)
from ..support.installs import pip_install, read_dist_info, run_example, venv_python

pytestmark = [pytest.mark.slow, pytest.mark.network]

def cuobjdump() -> Path:
    """NVIDIA's cuobjdump, from the nvidia-cuda-cuobjdump wheel of the test extras."""
    found = sorted(Path(sysconfig.get_paths()["purelib"]).glob("nvidia/*/bin/cuobjdump"))
    assert found, "install the test extras: pip install -e '.[test]'"
    return found[-1]


def gpu_functions(shared_object: Path) -> dict[tuple[str, str], set[str]]:
    """(kind, arch) -> names of the kernels compiled for it, as cuobjdump lists them."""
    listing: dict[tuple[str, str], set[str]] = {}
    sass = subprocess.run([cuobjdump(), "--dump-resource-usage", shared_object],
                          capture_output=True, text=True, check=True).stdout
    ptx = subprocess.run([cuobjdump(), "-ptx", shared_object], capture_output=True, text=True,
                         check=True).stdout
    for kind, text, pattern in (("sass", sass, r"^\s*Function (\S+):"),
                                ("ptx", ptx, r"^\.(?:visible )?\.entry (\w+)\(")):
        current = None
        for line in text.splitlines():
            if line.startswith("Fatbin "):
                current = None
            arch = re.match(r"arch = (sm_\w+)", line)
            if arch:
                current = (kind, arch.group(1))
                listing.setdefault(current, set())
            function = re.match(pattern, line)
            if function and current:
                listing[current].add(function.group(1))
    return listing


# ---- the shipped example -----------------------------------------------------------------------

def test_the_readme_build_line_builds_the_torch_release_the_lock_pins(tmp_path: Path,
        factory_cache: Path) -> None:
    """`factory build matrix.yaml --locked` from the repo: the release matrix.lock pins (the
    newest on PyPI when it was written), with the CUDA version that torch was built with."""
    (torch,) = tomllib.loads((REPO / "matrix.lock").read_text())["torch"]
    label = root_label()
    out = tmp_path / "index"
    result = run_factory("build", "matrix.yaml", "--locked", "--out", out, cwd=REPO,
                         env=cache_env(factory_cache))
    assert result.exit == 0, result.stdout + result.stderr
    assert f"img2gray/{label}/x86_64: built" in result.stdout
    (wheel,) = (out / "files").glob("*.whl")
    assert re.fullmatch(rf"img2gray-1\.0\.0\+{label}-cp39-abi3-manylinux_\d+_\d+_x86_64\.whl",
                        wheel.name), wheel.name
    assert f"\nRequires-Dist: torch=={torch['release']}.*\n" in read_dist_info(wheel, "METADATA")
    log = (out / "logs" / f"img2gray-{label}-x86_64.log").read_text()
    assert f"imported img2gray with torch {torch['version']}+cu" in log, log
    provenance = json.loads(read_dist_info(wheel, "provenance.json"))
    assert provenance["toolchain"]["nvcc"].startswith(f"{torch['cuda']}.")


def test_example_wheel_name_tags_and_metadata(example_wheel: Path) -> None:
    assert EXAMPLE_WHEEL.fullmatch(example_wheel.name), example_wheel.name
    _, version, _, tags = parse_wheel_filename(example_wheel.name)
    metadata = read_dist_info(example_wheel, "METADATA")
    assert f"\nVersion: {version}\n" in metadata and str(version) == "1.0.0+cu130torch211"
    assert "\nRequires-Dist: torch==2.11.*\n" in metadata
    assert "\nRequires-Python: >=3.9\n" in metadata
    assert {t.interpreter for t in tags} == {"cp39"} and {t.abi for t in tags} == {"abi3"}
    assert f"Tag: {next(iter(tags))}" in read_dist_info(example_wheel, "WHEEL")


def test_example_auditwheel_policy_and_dependencies(example_wheel: Path, tmp_path: Path) -> None:
    shown = subprocess.run([sys.executable, "-m", "auditwheel", "show", example_wheel],
                           capture_output=True, text=True)
    text = " ".join(shown.stdout.split())
    major, minor = present(EXAMPLE_WHEEL.fullmatch(example_wheel.name)).groups()
    # `show` cannot find torch's libraries (they come with torch); the symbol versions decide.
    assert f'This constrains the platform tag to "manylinux_{major}_{minor}_x86_64"' in text, \
        shown.stdout + shown.stderr
    with zipfile.ZipFile(example_wheel) as archive:
        archive.extractall(tmp_path)
        assert not [n for n in archive.namelist() if ".libs/" in n]  # nothing vendored
    (so,) = (tmp_path / "img2gray").glob("*.abi3.so")
    needed = subprocess.run(["readelf", "-d", so], capture_output=True, text=True).stdout
    libraries = set(re.findall(r"Shared library: \[(.+?)\]", needed))
    assert {"libc10.so", "libtorch_cpu.so", "libcudart.so.13"} <= libraries
    assert not [lib for lib in libraries if "python" in lib]


def test_example_holds_sass_for_the_cell_and_ptx_for_the_newest(example_wheel: Path,
        tmp_path: Path) -> None:
    with zipfile.ZipFile(example_wheel) as archive:
        archive.extractall(tmp_path)
    (so,) = (tmp_path / "img2gray").glob("_img2gray_*.abi3.so")
    assert [str(e) for e in fatbin_entries(so)] == ["compute_90", "sm_90"]
    listing = gpu_functions(so)
    assert set(listing) == {("sass", "sm_90"), ("ptx", "sm_90")}


def test_example_installs_and_runs_with_torch_211(example_wheel: Path, torch_venv: Path,
                                                  tmp_path: Path) -> None:
    def installed() -> tuple[set[str], list[str]]:
        """What the environment holds but img2gray (which another test of this worker may
        have installed into it before), and its img2gray."""
        lines = venv_python(torch_venv, "-m", "pip", "freeze").splitlines()
        ours = [line for line in lines if line.startswith("img2gray")]
        return set(lines) - set(ours), ours

    before, _ = installed()
    report = run_example(torch_venv, example_wheel, tmp_path)
    after, ours = installed()
    assert after == before  # torch untouched, nothing else added
    assert len(ours) == 1 and example_wheel.name.replace("+", "%2B") in ours[0], ours
    assert report["results"] == [True] * 4
    assert report["torch"] == "2.11.0+cu130"
    assert str(torch_venv) in report["location"]
    with zipfile.ZipFile(example_wheel) as archive:
        assert f"img2gray/{report['namespace']}.abi3.so" in archive.namelist()
    assert re.fullmatch(r"_img2gray_[0-9a-f]{7}", report["namespace"])


def test_example_passes_its_own_tests(example_wheel: Path, torch_venv: Path,
                                      tmp_path: Path) -> None:
    pip_install(torch_venv, example_wheel)
    tests = shutil.copytree(EXAMPLE / "tests", tmp_path / "tests")
    output = venv_python(torch_venv, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests),
                         cwd=tmp_path)
    assert re.search(r"\b(\d+) passed", output) and "failed" not in output


def test_running_again_rebuilds_nothing(example_build: tuple[Path, Result], example_wheel: Path,
                                        factory_cache: Path) -> None:
    out, first = example_build
    stamp = (example_wheel.stat().st_mtime_ns, example_wheel.read_bytes())
    again = run_factory("build", out.parent / "matrix.yaml", "--out", out,
                        env=cache_env(factory_cache))
    assert again.exit == 0, again.stdout + again.stderr
    assert "Nothing to rebuild: all 1 cell(s) are up to date." in again.stdout
    assert "img2gray/cu130torch211/x86_64: unchanged" in again.stdout
    assert "0 built, 1 unchanged, 0 failed, 0 skipped" in again.stdout
    assert (example_wheel.stat().st_mtime_ns, example_wheel.read_bytes()) == stamp
    log = out / "logs" / "img2gray-cu130torch211-x86_64.log"
    assert "built img2gray-1.0.0+cu130torch211" in log.read_text()
    assert "1 built, 0 unchanged, 0 failed, 0 skipped" in first.stdout


# ---- the multi-kernel and pure-Python fixtures -------------------------------------------------

@pytest.fixture(scope="session")
def fixtures_build(tmp_path_factory: pytest.TempPathFactory, factory_cache: Path) -> Path:
    root = tmp_path_factory.mktemp("fixtures")
    write(root / "matrix.yaml", f"""
        kernels:
          - path: {FIXTURES / "multikernel"}
            version: 0.1.0
          - path: {FIXTURES / "noarch-kernel"}
            version: 2.0.0
        torch: ["2.11"]
        cuda:
          "13.0":
            sms: ["8.0", "8.6", "9.0"]
    """)
    result = run_factory("build", "matrix.yaml", cwd=root, env=cache_env(factory_cache))
    assert result.exit == 0, result.stdout + result.stderr
    return root / "index"


def test_each_kernel_section_gets_the_sms_kernel_builder_predicts(fixtures_build: Path,
        tmp_path: Path) -> None:
    (wheel,) = (fixtures_build / "files").glob("multikernel-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(tmp_path)
    (so,) = (tmp_path / "multikernel").glob("*.abi3.so")
    listing = gpu_functions(so)
    by_kernel: dict[str, set[tuple[str, str]]] = {}
    for (kind, arch), functions in listing.items():
        for function in functions:
            kernel = present(re.search(r"(scale|offset|blackwell|arch)_kernel", function)).group(1)
            by_kernel.setdefault(kernel, set()).add((kind, arch))
    # Cell SMs 8.0 8.6 9.0 (PTX for 9.0). scale declares nothing: all of them. offset declares
    # 8.0 and 9.0+PTX: 8.0 serves 8.0 and 8.6. arch_specific declares 8.6 and 9.0a: 9.0a
    # replaces 9.0, and nothing declared is at or below 8.0 in major 8. blackwell declares 10.0
    # alone, which no SM of the cell selects, but the binding calls it: built for 10.0.
    assert by_kernel == {
        "scale": {("sass", "sm_80"), ("sass", "sm_86"), ("sass", "sm_90"), ("ptx", "sm_90")},
        "offset": {("sass", "sm_80"), ("sass", "sm_90"), ("ptx", "sm_90")},
        "arch": {("sass", "sm_86"), ("sass", "sm_90a")},
        "blackwell": {("sass", "sm_100")},
    }
    assert [str(e) for e in fatbin_entries(so)] == [
        "compute_90", "sm_80", "sm_86", "sm_90", "sm_90a", "sm_100"]


def test_flags_sections_and_generated_files(fixtures_build: Path, torch_venv: Path,
                                            tmp_path: Path) -> None:
    (wheel,) = (fixtures_build / "files").glob("multikernel-*.whl")
    log = (fixtures_build / "logs" / "multikernel-cu130torch211-x86_64.log").read_text()
    # The skipped and the CPU sections were never compiled (their sources #error out).
    assert "future/future.cu" not in log and "cpu_only.cpp" not in log
    assert "note: [kernel.blackwell] selects no SM of the cell; it is built for 10.0, outside " \
           "the cell's SMs, because torch-ext/torch_binding.cpp calls blackwell_arch" in log
    pip_install(torch_venv, wheel)
    output = venv_python(torch_venv, "-c", (
        "import torch, multikernel; "
        "print(multikernel.ops.host_check(), multikernel.add_op_namespace_prefix('scale')); "
        "[print(getattr(multikernel.ops, n).default._schema) "
        " for n in ('scale', 'offset', 'compiled_arch', 'blackwell_arch', 'host_check')]"),
        cwd=tmp_path)
    first, *schemas = output.strip().splitlines()
    check, name = first.split(" ")
    assert check == "7"  # from the section's cxx-flags
    assert re.fullmatch(r"_multikernel_[0-9a-f]{7}::scale", name)
    namespace = name.split("::")[0]
    assert schemas == [f"{namespace}::scale(Tensor x) -> Tensor",
                       f"{namespace}::offset(Tensor x) -> Tensor",
                       f"{namespace}::compiled_arch(Tensor like) -> Tensor",
                       f"{namespace}::blackwell_arch(Tensor like) -> Tensor",
                       f"{namespace}::host_check() -> int"]
    with zipfile.ZipFile(wheel) as archive:
        ops_py = archive.read("multikernel/_ops.py").decode()
    assert "Generated by kernel-wheel-factory" in ops_py and "setup.py" not in str(
        zipfile.ZipFile(wheel).namelist())


def test_pure_python_kernel(fixtures_build: Path, torch_venv: Path, tmp_path: Path) -> None:
    (wheel,) = (fixtures_build / "files").glob("noarch_kernel-*.whl")
    assert wheel.name == "noarch_kernel-2.0.0-py3-none-any.whl"
    metadata = read_dist_info(wheel, "METADATA")
    assert "\nRequires-Dist: torch\n" in metadata and "\nRequires-Dist: einops\n" in metadata
    # [general.cuda] python-depends: required where CUDA runs (not on macOS, which the cpu
    # backend also serves), and a real resolver finds it on PyPI.
    assert '\nRequires-Dist: nvidia-cutlass-dsl; sys_platform == "linux" or sys_platform == ' \
           '"win32"\n' in metadata
    resolved = subprocess.run(
        [find_uv_bin(), "pip", "install", "--dry-run", "--python",
         str(torch_venv / "bin" / "python"), str(wheel)], capture_output=True, text=True)
    assert resolved.returncode == 0, resolved.stderr
    assert re.search(r"^ \+ nvidia-cutlass-dsl==\d", resolved.stderr, re.M), resolved.stderr
    assert "Root-Is-Purelib: true" in read_dist_info(wheel, "WHEEL")
    names = zipfile.ZipFile(wheel).namelist()
    assert "noarch_kernel/settings.json" in names and "noarch_kernel/notes.txt" not in names
    venv_python(torch_venv, "-m", "pip", "install", "--quiet", "--no-deps", str(wheel))
    output = venv_python(torch_venv, "-c", (
        "import torch, noarch_kernel; print(noarch_kernel.double(torch.arange(3.0)).tolist(), "
        "noarch_kernel.add_op_namespace_prefix('double'))"), cwd=tmp_path)
    values, name = output.strip().rsplit(" ", 1)
    assert values == "[0.0, 2.0, 4.0]" and re.fullmatch(r"_noarch_kernel_[0-9a-f]{7}::double", name)


# ---- failures and published files --------------------------------------------------------------

def test_a_failed_cell_does_not_stop_the_others(tmp_path: Path, factory_cache: Path) -> None:
    broken = shutil.copytree(EXAMPLE, tmp_path / "img2gray")
    (broken / "csrc" / "img2gray.cu").write_text("this is not CUDA\n")
    write(tmp_path / "matrix.yaml", f"""
        kernels:
          - {{path: img2gray, version: 1.0.0}}
          - {{path: {FIXTURES / "noarch-kernel"}, version: 2.0.0}}
        torch: ["2.11"]
        cuda: {{"13.0": {{sms: ["9.0"]}}}}
    """)
    result = run_factory("build", "matrix.yaml", cwd=tmp_path, env=cache_env(factory_cache))
    assert result.exit == 1
    assert re.search(r"img2gray/cu130torch211/x86_64: failed \(compiling csrc/img2gray\.cu "
                     r"failed \(exit \d+\): \S*img2gray\.cu\(1\): error", result.stdout), \
        result.stdout
    assert "log: " in result.stdout and "1 built, 0 unchanged, 1 failed, 0 skipped" in result.stdout
    assert sorted(p.name for p in (tmp_path / "index" / "files").iterdir()) == [
        "noarch_kernel-2.0.0-py3-none-any.whl", "noarch_kernel-2.0.0-py3-none-any.whl.metadata"]
    # The failed cell is on the browse page's grid with its reason.
    project = json.loads((tmp_path / "index" / "browse" / "img2gray.json").read_text())
    (cell,) = project["versions"][0]["cells"]
    assert cell["status"] == "failed" and "compiling csrc/img2gray.cu failed" in cell["detail"]
    log = (tmp_path / "index" / "logs" / "img2gray-cu130torch211-x86_64.log").read_text()
    assert "this is not CUDA" in log or "error" in log
    assert "FAILED: compiling csrc/img2gray.cu failed" in log


def test_published_files_are_immutable(tmp_path: Path, factory_cache: Path) -> None:
    kernel = shutil.copytree(FIXTURES / "noarch-kernel", tmp_path / "noarch-kernel")
    write(tmp_path / "matrix.yaml", """
        kernels: [{path: noarch-kernel, version: 2.0.0}]
        torch: ["2.11"]
        cuda: {"13.0": {sms: ["9.0"]}}
    """)
    env = cache_env(factory_cache)
    assert run_factory("build", "matrix.yaml", cwd=tmp_path, env=env).exit == 0
    wheel = tmp_path / "index" / "files" / "noarch_kernel-2.0.0-py3-none-any.whl"
    published = wheel.read_bytes()

    (kernel / "torch-ext" / "noarch_kernel" / "__init__.py").write_text("CHANGED = True\n")
    changed = run_factory("build", "matrix.yaml", cwd=tmp_path, env=env)
    assert changed.exit == 1
    assert "is already published with different content; published files are immutable" \
        in changed.stdout
    assert wheel.read_bytes() == published

    forced = run_factory("build", "matrix.yaml", "--force", cwd=tmp_path, env=env)
    assert forced.exit == 0, forced.stdout
    assert wheel.read_bytes() != published
    assert b"CHANGED = True" in zipfile.ZipFile(wheel).read("noarch_kernel/__init__.py")


def test_cells_build_in_parallel_with_jobs(tmp_path: Path, factory_cache: Path) -> None:
    for name in ("first", "second"):
        kernel = shutil.copytree(FIXTURES / "noarch-kernel", tmp_path / name)
        build_toml = kernel / "build.toml"
        build_toml.write_text(build_toml.read_text().replace('"noarch-kernel"', f'"{name}"'))
        (kernel / "torch-ext" / "noarch_kernel").rename(kernel / "torch-ext" / name)
    write(tmp_path / "matrix.yaml", """
        kernels: [{path: first, version: 1.0.0}, {path: second, version: 1.0.0}]
        torch: ["2.11"]
        cuda: {"13.0": {sms: ["9.0"]}}
    """)
    result = run_factory("build", "matrix.yaml", "--jobs", "2", cwd=tmp_path,
                         env=cache_env(factory_cache))
    assert result.exit == 0, result.stdout + result.stderr
    assert sorted(p.name for p in (tmp_path / "index" / "files").glob("*.whl")) == [
        "first-1.0.0-py3-none-any.whl", "second-1.0.0-py3-none-any.whl"]
    assert "2 built, 0 unchanged, 0 failed, 0 skipped" in result.stdout
