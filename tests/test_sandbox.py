"""A project's build on this machine runs confined: an allow-listed environment (none of the
factory's secrets), the file system read-only but for its build folder, no network; without
bubblewrap it is refused with one line, unless the user opts out."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from factory.cells import sandbox
from factory.cells.sandbox import confined_command, confined_environment
from factory.errors import BuildError

from .conftest import REPO
from .system import debian_package

SECRETS = {"TWINE_PASSWORD": "pypi-s3cret", "HF_TOKEN": "hf_s3cret", "GITHUB_TOKEN": "ghp_s3cret",
           "AWS_SECRET_ACCESS_KEY": "aws-s3cret", "SOMETHING_ELSE": "any-value"}


def test_the_build_sees_an_allow_list_and_a_home_of_its_own(tmp_path):
    environ = {**SECRETS, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/root",
               "TMPDIR": "/var/tmp"}
    env = confined_environment(tmp_path / "work", {"CUDA_HOME": "/cuda", "FORCE_BUILD": "1",
                                                   "PATH": "/cuda/bin:/usr/bin:/bin"}, environ)
    assert not set(SECRETS) & set(env)
    assert env["HOME"] == str(tmp_path / "work" / "home") and (tmp_path / "work/home").is_dir()
    assert env["TMPDIR"] == str(tmp_path / "work" / "tmp")
    assert env["PATH"] == "/cuda/bin:/usr/bin:/bin" and env["LANG"] == "C.UTF-8"
    assert env["CUDA_HOME"] == "/cuda" and env["FORCE_BUILD"] == "1"


def test_without_bubblewrap_a_build_is_refused_with_what_to_do(monkeypatch):
    sandbox._working_bwrap.cache_clear()
    monkeypatch.setattr(shutil, "which", lambda name: None)
    try:
        with pytest.raises(BuildError) as caught:
            confined_command(["true"], sandbox.Path("/tmp"), sandbox.Path("/tmp"))
    finally:
        sandbox._working_bwrap.cache_clear()
    assert str(caught.value) == (
        "a setup.py / pyproject project's build runs its own code; on this machine the factory "
        "runs it only confined by bubblewrap (bwrap), which is not installed: install "
        "bubblewrap (apt install bubblewrap), build with --runner docker, or pass --unconfined "
        "to run it with your rights, your files and your network")


HOSTILE = """
import os, socket, sys
from pathlib import Path
for target in sys.argv[1:]:
    try:
        Path(target).write_text("written")
        print("wrote", target)
    except OSError as exc:
        print("blocked", target, exc.strerror)
try:
    socket.create_connection(("1.1.1.1", 53), timeout=3)
    print("network: reached")
except OSError as exc:
    print("network: blocked")
Path("built.txt").write_text("inside")
print("env:", sorted(os.environ))
"""


def test_a_confined_command_writes_its_build_folder_only_and_has_no_network(tmp_path):
    debian_package("bubblewrap", "bwrap")
    work = tmp_path / "work"
    (work / "src").mkdir(parents=True)
    outside = tmp_path / "outside.txt"
    published = tmp_path / "index" / "files"
    published.mkdir(parents=True)
    stray = published / "stray-1.0-py3-none-any.whl"
    home = sandbox.Path.home() / ".kernel-wheel-factory-sandbox-test"
    repo = REPO / ".kernel-wheel-factory-sandbox-test"
    script = work / "src" / "hostile.py"
    script.write_text(HOSTILE)
    env = confined_environment(work, {"PATH": "/usr/bin:/bin"}, {**SECRETS})
    done = subprocess.run(confined_command([sys.executable, str(script), str(outside),
                                            str(stray), str(home), str(repo)], work,
                                           work / "src"),
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    # everything but the build folder is read-only, /tmp too (the build's TMPDIR is its own)
    for target in (outside, stray, home, repo):
        assert not target.exists()
        assert f"blocked {target} Read-only file system" in done.stdout
    assert "network: blocked" in done.stdout
    assert (work / "src" / "built.txt").read_text() == "inside"
    assert not any(value in done.stdout for value in SECRETS.values())
