"""Cross-compiled cells (`cross: true`): their link line and header folders, the cross compiler
and the emulator's wheels, and what is said when the cross compiler or the emulator is
missing (the plans are in tests/unit/test_cross_plan.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from packaging.version import Version

from factory.compile.commands import link_command
from factory.compile.deps import torch_includes
from factory.errors import BuildError
from factory.system.machine import read_machine
from factory.toolchain import Toolchain, emulated

from ..support.checks import present
from ..support.plans import TOOLCHAIN


def emulated_toolchain(tmp_path: Path) -> Toolchain:
    site = tmp_path / "sysroot/usr/lib/python3/dist-packages"
    (site / "nvidia/cu13/lib").mkdir(parents=True)
    (site / "nvidia/cu13/lib/libcudart.so.13").write_bytes(b"")
    torch = dataclasses.replace(TOOLCHAIN.torch, root=tmp_path, site_packages=site,
                                python_include=tmp_path / "sysroot/usr/include/python3.11",
                                platform="aarch64")
    return dataclasses.replace(TOOLCHAIN, torch=torch, cxx="aarch64-linux-gnu-g++")


def test_a_cross_link_takes_the_cuda_runtime_of_the_cells_platform(tmp_path: Path) -> None:
    toolchain = emulated_toolchain(tmp_path)
    argv = link_command([Path("/o/a.o")], Path("/pkg/x.abi3.so"), toolchain)
    lib = tmp_path / "sysroot/usr/lib/python3/dist-packages/nvidia/cu13/lib"
    assert argv[0] == "aarch64-linux-gnu-g++"
    assert f"-L{lib}" in argv and argv[-1] == "-l:libcudart.so.13"
    assert "-lcudart" not in argv and f"-L{present(TOOLCHAIN.cuda).lib}" not in argv


def test_debians_python_headers_come_with_their_architectures_folder(tmp_path: Path) -> None:
    toolchain = emulated_toolchain(tmp_path)
    folders = torch_includes(toolchain)
    include = tmp_path / "sysroot/usr/include"
    assert folders.index(include / "python3.11") + 1 == folders.index(include)
    assert Path("/usr/include") not in torch_includes(TOOLCHAIN)


def test_missing_cross_tools_are_named_with_what_installs_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("factory.toolchain.emulated.shutil.which", lambda name: None)
    monkeypatch.delenv("CXX_aarch64", raising=False)
    with pytest.raises(BuildError) as raised:
        emulated.emulation("aarch64")
    assert str(raised.value) == (
        "cross-building aarch64 cells needs g++-aarch64-linux-gnu and qemu-user-static "
        "(Debian and Ubuntu: apt-get install g++-aarch64-linux-gnu qemu-user-static)")
    with pytest.raises(BuildError, match="cannot cross-build riscv64"):
        emulated.emulation("riscv64")


def test_cxx_aarch64_chooses_the_cross_compiler(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("factory.toolchain.emulated.shutil.which", lambda name: f"/usr/bin/{name}")
    chosen = emulated.cross_compiler("aarch64",
                                     read_machine({"CXX_aarch64": "/opt/cross/bin/g++"}))
    assert chosen.command == "/opt/cross/bin/g++" and chosen.origin == "$CXX_aarch64"
    assert emulated.cross_compiler("aarch64", read_machine({})).command == \
        "/usr/bin/aarch64-linux-gnu-g++"


def test_uv_installs_wheels_for_the_emulated_cpython(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("factory.toolchain.emulated.shutil.which", lambda name: f"/usr/bin/{name}")
    assert emulated.wheel_platform_args("aarch64") == [
        "--python-platform", "aarch64-manylinux_2_36", "--python-version", "3.11"]
    assert Version(emulated.EMULATED_PYTHON) == Version("3.11")
