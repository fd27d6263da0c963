"""Finding CUDA toolkits: PyPI has nvcc only from CUDA 13 on; CUDA 12 must be on the machine."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, cast

import pytest
from packaging.version import Version

from factory.cells.job import check_host_runtime
from factory.errors import BuildError
from factory.system.machine import read_machine
from factory.system.process import Log
from factory.toolchain import HostCompiler, Toolchain, host_compiler
from factory.toolchain.cuda import CudaToolkit, provide_cuda
from factory.toolchain.torch import TorchEnv


def fake_toolkit(root: Path, release: str) -> Path:
    """A folder laid out like a toolkit whose nvcc reports `release` (e.g. "12.4.131")."""
    nvcc = root / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    major_minor = ".".join(release.split(".")[:2])
    nvcc.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {major_minor}, "
                    f"V{release}'\n")
    nvcc.chmod(0o755)
    (root / "include").mkdir()
    (root / "lib64").mkdir()
    (root / "lib64" / "libcudart.so").write_bytes(b"")
    return root


@pytest.fixture
def no_installed_cuda(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))


def test_cuda_12_without_a_toolkit_says_what_to_do(no_installed_cuda: None, tmp_path: Path) -> None:
    with pytest.raises(BuildError) as caught:
        provide_cuda(Version("12.8"), None, tmp_path / "cache", Log(io.StringIO()))
    message = str(caught.value)
    assert "no CUDA 12.8 toolkit on this machine: nvcc for CUDA 12 is not on PyPI" in message
    assert "cuda-minimal-build-12-8" in message and 'cuda."12.8".home' in message
    assert not (tmp_path / "cache").exists()


def test_cuda_12_from_cuda_home(no_installed_cuda: None, tmp_path: Path) -> None:
    home = fake_toolkit(tmp_path / "cuda-12.8", "12.8.93")
    named = read_machine({"CUDA_HOME": str(home)}).cuda_homes
    toolkit = provide_cuda(Version("12.8"), None, tmp_path / "cache", Log(io.StringIO()),
                           homes=named)
    assert (toolkit.version, toolkit.home, toolkit.origin) == (Version("12.8.93"), home,
                                                               "installed")
    assert toolkit.lib == home / "lib64"


def test_a_home_of_another_version_is_refused(tmp_path: Path) -> None:
    home = fake_toolkit(tmp_path / "cuda", "12.4.131")
    with pytest.raises(BuildError, match=r"bin/nvcc is CUDA 12\.4\.131, the matrix asks for "
                                         r"CUDA 12\.8"):
        provide_cuda(Version("12.8"), home, tmp_path / "cache", Log(io.StringIO()))


def test_an_installed_toolkit_of_the_cells_version_comes_before_pypi(no_installed_cuda: None,
        tmp_path: Path) -> None:
    """CUDA 13.0 is on PyPI, but a 13.0 toolkit the machine has is used as it is: nothing is
    downloaded into the cache."""
    home = fake_toolkit(tmp_path / "cuda-13.0", "13.0.88")
    toolkit = provide_cuda(Version("13.0"), None, tmp_path / "cache", Log(io.StringIO()),
                           homes=(home,))
    assert (toolkit.home, toolkit.origin) == (home, "installed")
    assert not (tmp_path / "cache").exists()


def test_a_toolkit_of_another_version_on_the_machine_is_passed_over(no_installed_cuda: None,
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    named = (fake_toolkit(tmp_path / "cuda-12.8", "12.8.93"),)
    on_path = fake_toolkit(tmp_path / "cuda-12.4", "12.4.131")
    monkeypatch.setenv("PATH", str(on_path / "bin"))
    toolkit = provide_cuda(Version("12.4"), None, tmp_path / "cache", Log(io.StringIO()),
                           homes=named)
    assert (toolkit.home, str(toolkit.version)) == (on_path, "12.4.131")


def test_a_toolkit_in_a_debian_layout_finds_its_runtime(no_installed_cuda: None,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    home = fake_toolkit(tmp_path / "usr", "12.4.131")
    (home / "lib64" / "libcudart.so").unlink()
    (home / "lib" / "x86_64-linux-gnu").mkdir(parents=True)
    (home / "lib" / "x86_64-linux-gnu" / "libcudart.so.12").write_bytes(b"")
    toolkit = provide_cuda(Version("12.4"), home, tmp_path / "cache", Log(io.StringIO()))
    assert toolkit.lib == home / "lib" / "x86_64-linux-gnu"
    assert not toolkit.system_include  # only /usr/include itself is the system's


def test_a_toolkit_without_a_runtime_is_refused(tmp_path: Path) -> None:
    home = fake_toolkit(tmp_path / "cuda", "12.4.131")
    (home / "lib64" / "libcudart.so").unlink()
    with pytest.raises(BuildError, match=r"the CUDA toolkit at .*cuda has no libcudart\.so"):
        provide_cuda(Version("12.4"), home, tmp_path / "cache", Log(io.StringIO()))


def fake_compilers(folder: Path, **versions: str) -> Path:
    """g++ commands that report the given versions (g_13="13.3.0" makes g++-13)."""
    folder.mkdir()
    for name, version in versions.items():
        command = folder / name.replace("_", "++-").replace("gxx", "g++")
        command.write_text(f"#!/bin/sh\necho {version}\n")
        command.chmod(0o755)
    return folder


@pytest.mark.parametrize(("cuda", "compilers", "chosen"), [
    ("13.0", {"gxx": "14.2.0", "g_13": "13.3.0"}, "g++"),
    ("12.4", {"gxx": "14.2.0", "g_13": "13.3.0", "g_12": "12.4.0"}, "g++-13"),
    ("12.4", {"gxx": "14.2.0", "g_12": "12.4.0", "g_15": "15.1.0"}, "g++-12"),
    ("12.8", {"gxx": "14.2.0"}, "g++"),
    ("12.2", {"gxx": "12.2.0"}, "g++"),
])
def test_the_host_compiler_is_one_nvcc_accepts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                               cuda: str, compilers: dict[str, Any],
                                               chosen: str) -> None:
    monkeypatch.setenv("PATH", str(fake_compilers(tmp_path / "bin", **compilers)))
    found = host_compiler(Version(cuda), None)
    assert found.command == chosen
    assert found.origin == ("the PATH ($CXX unset)" if chosen == "g++" else
                            f"the PATH, the newest g++ nvcc of CUDA {cuda} accepts (gcc 13 at "
                            "most; $CXX unset)")


def test_no_accepted_host_compiler_says_what_to_install(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(fake_compilers(tmp_path / "bin", gxx="14.2.0")))
    with pytest.raises(BuildError, match=r"nvcc of CUDA 12\.4 accepts gcc 13 at most, and this "
                                         r"machine has g\+\+ 14\.2\.0: install g\+\+-13"):
        host_compiler(Version("12.4"), None)
    # the user's choice ($CXX, as the machine's settings read it) is kept, named as theirs
    given = read_machine({"CXX": "clang++-17"}).cxx
    assert host_compiler(Version("12.4"), given) == HostCompiler("clang++-17", "$CXX")


def toolchain_with(cxx: str, origin: str) -> Toolchain:
    return Toolchain(cast(CudaToolkit, None), cast(TorchEnv, None), cxx, "17",
                     cxx_origin=origin)


def test_a_compiler_that_links_libstdcxx_statically_is_refused_before_compiling(
        tmp_path: Path) -> None:
    """A machine's CXX was a wrapper adding -static-libstdc++: every wheel failed the
    libstdc++ gate, after the whole compile. The probe says so at once, and how to fix it."""
    wrapper = tmp_path / "c++"
    wrapper.write_text('#!/bin/sh\nexec g++ -static-libstdc++ "$@"\n')
    wrapper.chmod(0o755)
    log = Log(io.StringIO())
    check_host_runtime(toolchain_with("g++", "the PATH ($CXX unset)"), tmp_path / "plain", log)
    with pytest.raises(BuildError) as caught:
        check_host_runtime(toolchain_with(str(wrapper), "$CXX"), tmp_path / "wrapped", log)
    assert str(caught.value) == (
        f"the host compiler {wrapper} (from $CXX) links libstdc++ into shared objects "
        "statically (as -static-libstdc++ does): every wheel it links would fail the libstdc++ "
        "gate; set CXX to a compiler that links libstdc++.so.6, as torch does (e.g. "
        "CXX=/usr/bin/g++)")
    broken = tmp_path / "broken"
    broken.write_text("#!/bin/sh\necho 'c++: fatal error: no licence' >&2\nexit 1\n")
    broken.chmod(0o755)
    with pytest.raises(BuildError, match=r"cannot link a one-line shared object: c\+\+: "
                                         r"fatal error: no licence$"):
        check_host_runtime(toolchain_with(str(broken), "$CXX"), tmp_path / "broken-work", log)
