"""What the factory runs of others on this machine (a project's build, a kernel's import gate and
tests) runs confined: an allow-listed environment (none of the factory's secrets), the file
system read-only but for its build folder, no network, no other process's /proc; bubblewrap
from Debian's archive where none is installed."""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from factory.cells.sandbox import confined_command, confined_environment
from factory.prove.testenv import Needed, TestEnvUnavailable, make_test_env
from factory.system.machine import Machine
from factory.system.process import Log
from factory.system.uv import uv_bin
from factory.toolchain.bubblewrap import provided_bwrap
from factory.toolchain.torch import TorchEnv

from ..support.cli import SECRETS
from ..support.factory import REPO
from ..support.system import debian_package

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


def test_a_confined_command_writes_its_build_folder_only_and_has_no_network(tmp_path: Path) -> None:
    debian_package("bubblewrap", "bwrap")
    work = tmp_path / "work"
    (work / "src").mkdir(parents=True)
    outside = tmp_path / "outside.txt"
    published = tmp_path / "index" / "files"
    published.mkdir(parents=True)
    stray = published / "stray-1.0-py3-none-any.whl"
    home = Path.home() / ".kernel-wheel-factory-sandbox-test"
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


SCAN = """
import sys
from pathlib import Path
found = 0
for environ in Path("/proc").glob("*/environ"):
    try:
        found += sys.argv[1].encode() in environ.read_bytes()
    except OSError:
        pass
print("found", found)
"""


def test_a_confined_process_reads_no_other_processs_environment(tmp_path: Path) -> None:
    """A process of this user holds a secret in its environment, as the factory does; what
    the factory starts confined has a /proc of its own process namespace, where that process's
    /proc/PID/environ is not (out of the sandbox it is there to read)."""
    debian_package("bubblewrap", "bwrap")
    secret = "hf_only-in-the-holders-environment"
    work = tmp_path / "work"
    work.mkdir()
    scan = [sys.executable, "-c", SCAN, secret]
    env = confined_environment(work, {"PATH": "/usr/bin:/bin"})
    holder = subprocess.Popen(["sleep", "120"], env={"KWF_SANDBOX_TOKEN": secret})
    try:
        unconfined = subprocess.run(scan, capture_output=True, text=True, env=env, timeout=60)
        confined = subprocess.run(confined_command(scan, work, work), capture_output=True,
                                  text=True, env=env, timeout=60)
    finally:
        holder.kill()
        holder.wait()
    assert unconfined.stdout.split() == ["found", "1"], unconfined.stderr
    assert confined.returncode == 0, confined.stderr
    assert confined.stdout.split() == ["found", "0"]


@pytest.mark.network
def test_debian_bubblewrap_unpacked_into_the_cache_confines_as_an_installed_one(
        tmp_path: Path) -> None:
    """Where the PATH has no bwrap, the factory unpacks Debian's (checked back to the archive's
    signature) into its cache, once; it runs a command with no network."""
    debian_package("gpgv", "gpgv")
    with open(tmp_path / "log", "w") as handle:
        bwrap = provided_bwrap(tmp_path / "cache", Log(handle), Machine())
        assert provided_bwrap(tmp_path / "cache", Log(handle), Machine()) == bwrap  # made once
    assert bwrap == tmp_path / "cache" / "tools" / "bubblewrap" / "usr" / "bin" / "bwrap"
    log = (tmp_path / "log").read_text()
    assert log.count("unpacking Debian") == 1 and re.search(r"bubblewrap \d", log), log
    done = subprocess.run([str(bwrap), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                           "--unshare-net", "--unshare-pid", "--", sys.executable, "-c",
                           "import socket; socket.create_connection(('1.1.1.1', 53), 3)"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "Network is unreachable" in done.stderr, done.stderr


# A source distribution whose build backend is its own module: building it runs that module.
BACKEND = """
from pathlib import Path
Path({marker!r}).write_text("built")
def build_wheel(*args, **kwargs): raise SystemExit("no")
"""


def test_a_requirement_only_there_as_source_is_never_built(tmp_path: Path) -> None:
    """A kernel names what its test environment installs (its wheel's Requires-Dist, its test
    inputs); a requirement that is only a source distribution would run its build's code
    with the factory's rights, unconfined: it is refused in one line, and its code never
    runs."""
    marker = tmp_path / "ran"
    source = tmp_path / "sdist" / "sneaky-1.0"
    source.mkdir(parents=True)
    (source / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: sneaky\nVersion: 1.0\n")
    (source / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n')
    (source / "backend.py").write_text(BACKEND.format(marker=str(marker)))
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    with tarfile.open(wheelhouse / "sneaky-1.0.tar.gz", "w:gz") as archive:
        archive.add(source, "sneaky-1.0")
    beside = tmp_path / "torch-env"  # stands in for a torch environment: only its python is used
    subprocess.run([uv_bin(), "venv", "--quiet", "--python", sys.executable, str(beside)],
                   check=True, timeout=120)
    site = Path(subprocess.run(
        [str(beside / "bin" / "python"), "-c",
         "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True).stdout.strip())
    torch = TorchEnv(root=beside, python=beside / "bin" / "python", site_packages=site,
                     torch_version="2.11.0", torch_cuda=None, cxx11_abi=True,
                     python_include=beside, cuda_library_includes=())
    needed = [Needed("sneaky", "demo.whl (Requires-Dist)")]
    with open(tmp_path / "log", "w") as handle, \
            pytest.raises(TestEnvUnavailable) as refused:
        make_test_env(tmp_path / "env", torch, tmp_path / "demo.whl", needed,
                      tmp_path / "cache", Log(handle), True, (wheelhouse,))
    assert str(refused.value).startswith(
        "sneaky cannot be had as a wheel: only its source is there, and a requirement is "
        "never built from source"), refused.value
    assert not marker.exists()


READ = """
import sys
from pathlib import Path
for name in sys.argv[1:]:
    try:
        print(name, repr(Path(name).read_text()))
    except OSError as exc:
        print(name, "unreadable:", exc.strerror)
"""


def test_a_confined_command_finds_the_users_secret_files_empty(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The file system is read-only inside, but readable: a build that read the object cache's
    key, or cloud and Git credentials, could copy them into the wheel it makes. Their folders
    are empty inside and their files cannot be read."""
    debian_package("bubblewrap", "bwrap")
    home, config = tmp_path / "home", tmp_path / "config"
    secrets = {config / "kernel-wheel-factory" / "object-cache.key": "the-object-key-bytes",
               home / ".aws" / "credentials": "aws_secret_access_key = AKIA-SECRET",
               home / ".ssh" / "id_ed25519": "-----BEGIN OPENSSH PRIVATE KEY-----",
               home / ".netrc": "machine example.com password netrc-secret",
               home / ".git-credentials": "https://user:git-secret@example.com"}
    for path, text in secrets.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    kept = tmp_path / "dotfiles" / "docker"  # ~/.docker a link to where it is kept
    kept.mkdir(parents=True)
    (kept / "config.json").write_text('{"auths": {"registry": "docker-secret"}}')
    (home / ".docker").symlink_to(kept)
    secrets[home / ".docker" / "config.json"] = "docker-secret"
    (home / "notes.txt").write_text("not a secret")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    work = tmp_path / "work"
    work.mkdir()
    argv = [sys.executable, "-c", READ, *map(str, secrets), str(home / "notes.txt")]
    done = subprocess.run(confined_command(argv, work, work), capture_output=True, text=True,
                          env=confined_environment(work, {"PATH": "/usr/bin:/bin"}), timeout=60)
    assert done.returncode == 0, done.stderr
    for path, text in secrets.items():
        assert text not in done.stdout
        assert f"{path} unreadable: " in done.stdout
    assert "'not a secret'" in done.stdout  # the rest of the home folder is there


def test_a_sandbox_whose_set_up_failed_before_its_command_ran_is_started_again(
        tmp_path: Path) -> None:
    """bwrap's set-up can fail for a moment (a container's mount gone while bwrap remounts the
    file system read-only, where docker builds run beside the factory): nothing of the
    command ran, so the sandbox is started again. Here a folder bound into it is missing at
    the first start and made once bwrap has said so."""
    debian_package("bubblewrap", "bwrap")
    work, late = tmp_path / "work", tmp_path / "late"
    work.mkdir()
    argv = confined_command(["sh", "-c", "echo ran >> count"], work, work, devices=(str(late),))
    started = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=confined_environment(work, {"PATH": "/usr/bin:/bin"}))
    assert started.stderr is not None
    said = []
    for line in started.stderr:
        said.append(line)
        if "starting it again" in line:
            late.mkdir()
    assert started.wait(timeout=60) == 0, said
    assert (work / "count").read_text() == "ran\n"
    assert said[0].startswith("bwrap: Can't find source path ")
    assert "set-up failed before its command started; starting it again (2 of 4)" in said[1]
    assert len(said) == 2


def test_a_confined_command_that_fails_runs_once(tmp_path: Path) -> None:
    """A command that ran and failed is never started again, whatever it printed (here what
    bwrap says when its set-up fails): only bwrap's own status pipe says the command ran."""
    debian_package("bubblewrap", "bwrap")
    work = tmp_path / "work"
    work.mkdir()
    script = ("echo ran >> count; echo \"bwrap: Can't bind mount /oldroot/ on /newroot/: "
              "Unable to apply mount flags\" >&2; exit 1")
    done = subprocess.run(confined_command(["sh", "-c", script], work, work),
                          capture_output=True, text=True, timeout=60,
                          env=confined_environment(work, {"PATH": "/usr/bin:/bin"}))
    assert done.returncode == 1
    assert (work / "count").read_text() == "ran\n"
    assert "starting it again" not in done.stderr
