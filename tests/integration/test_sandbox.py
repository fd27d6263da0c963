"""A project's build on this machine runs confined: an allow-listed environment (none of the
factory's secrets), the file system read-only but for its build folder, no network; without
bubblewrap it is refused with one line, unless the user opts out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from factory.cells.sandbox import confined_command, confined_environment

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
