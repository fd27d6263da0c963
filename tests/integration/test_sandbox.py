"""What the factory runs of others on this machine (a project's build, a kernel's import gate and
tests) runs confined: an allow-listed environment (none of the factory's secrets), the file
system read-only but for its build folder, no network, no other process's /proc; bubblewrap
from Debian's archive where none is installed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from factory.cells.sandbox import confined_command, confined_environment
from factory.system.process import Log
from factory.toolchain.bubblewrap import provided_bwrap

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
        bwrap = provided_bwrap(tmp_path / "cache", Log(handle))
        assert provided_bwrap(tmp_path / "cache", Log(handle)) == bwrap  # made once
    assert bwrap == tmp_path / "cache" / "tools" / "bubblewrap" / "usr" / "bin" / "bwrap"
    log = (tmp_path / "log").read_text()
    assert log.count("unpacking Debian") == 1 and re.search(r"bubblewrap \d", log), log
    done = subprocess.run([str(bwrap), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                           "--unshare-net", "--unshare-pid", "--", sys.executable, "-c",
                           "import socket; socket.create_connection(('1.1.1.1', 53), 3)"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "Network is unreachable" in done.stderr, done.stderr
