"""A project's build on this machine runs confined: an allow-listed environment (none of the
factory's secrets), the file system read-only but for its build folder, no network; without
bubblewrap it is refused with one line, unless the user opts out."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from factory.cells import sandbox
from factory.cells.sandbox import confined_command, confined_environment
from factory.errors import BuildError

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
