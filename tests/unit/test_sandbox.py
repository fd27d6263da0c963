"""A project's build on this machine runs confined: an allow-listed environment (none of the
factory's secrets), the file system read-only but for its build folder, no network; without
bubblewrap it is refused with one line, unless the user opts out."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from factory.cells import sandbox
from factory.cells.sandbox import confined_command, confined_environment, gpu_devices
from factory.errors import BuildError
from factory.system.machine import Machine

from ..support.cli import SECRETS


def test_the_build_sees_an_allow_list_and_a_home_of_its_own(tmp_path: Path) -> None:
    environ = {**SECRETS, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/root",
               "TMPDIR": "/var/tmp"}
    env = confined_environment(tmp_path / "work", {"CUDA_HOME": "/cuda", "FORCE_BUILD": "1",
                                                   "PATH": "/cuda/bin:/usr/bin:/bin"}, environ)
    assert not set(SECRETS) & set(env)
    assert env["HOME"] == str(tmp_path / "work" / "home") and (tmp_path / "work/home").is_dir()
    assert env["TMPDIR"] == str(tmp_path / "work" / "tmp")
    assert env["PATH"] == "/cuda/bin:/usr/bin:/bin" and env["LANG"] == "C.UTF-8"
    assert env["CUDA_HOME"] == "/cuda" and env["FORCE_BUILD"] == "1"


def test_without_bubblewrap_a_build_is_refused_with_what_to_do(
        monkeypatch: pytest.MonkeyPatch) -> None:
    sandbox._bwrap.cache_clear()
    monkeypatch.setattr(shutil, "which", lambda name: None)
    try:
        with pytest.raises(BuildError) as caught:
            confined_command(["true"], Path("/tmp"), Path("/tmp"))
    finally:
        sandbox._bwrap.cache_clear()
    assert str(caught.value) == (
        "a setup.py / pyproject project's build runs its own code; on this machine the factory "
        "runs it only confined by bubblewrap (bwrap), which is not installed: install "
        "bubblewrap (apt install bubblewrap), build with --runner docker, or pass --unconfined "
        "to run it with your rights, your files and your network")


def test_a_gpus_device_files_are_bound_into_the_sandbox(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-caps/nvidia-cap1",
                 "null", "dri/card0"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).touch()
    devices = gpu_devices(tmp_path)
    assert devices == tuple(str(tmp_path / name) for name in (
        "nvidia-caps", "nvidia-uvm", "nvidia0", "nvidia1", "nvidiactl"))
    monkeypatch.setattr(sandbox, "_bwrap", lambda: ("/usr/bin/bwrap", ""))
    argv = confined_command(["python", "-c", "pass"], tmp_path / "work", tmp_path / "work",
                            devices=devices)
    bound = [argv[index + 1] for index, part in enumerate(argv) if part == "--dev-bind"]
    assert bound == list(devices)
    # bound after the sandbox's own /dev is made, before the command
    assert argv.index("--dev") < argv.index("--dev-bind") < argv.index("--")
    assert argv[argv.index("--") + 1:] == ["python", "-c", "pass"]


def test_where_debian_bubblewrap_cannot_be_had_the_refusal_says_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(sandbox, "_PROVIDED", {})

    def unreachable(cache: Path, log: object, machine: object) -> Path:
        raise BuildError("deb.debian.org cannot be reached")

    monkeypatch.setattr(sandbox, "provided_bwrap", unreachable)
    sandbox._bwrap.cache_clear()
    try:
        sandbox.provide_bwrap(tmp_path, None, Machine())  # type: ignore[arg-type]
        with pytest.raises(BuildError) as caught:
            confined_command(["true"], tmp_path, tmp_path, sandbox.KERNEL_CODE)
    finally:
        sandbox._bwrap.cache_clear()
    assert str(caught.value).startswith(
        "a kernel's import gate and tests run the kernel's own code; on this machine the "
        "factory runs it only confined by bubblewrap (bwrap), which is not installed, and "
        "Debian's could not be had (deb.debian.org cannot be reached): install bubblewrap")
