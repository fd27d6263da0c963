"""Hostile input, as a careless or malicious user gives it, through the `factory` command run
in-process: every case ends with exit status 2 (bad input) or 1 (the work failed), exactly one
error line, no traceback, no credential printed, the output folder byte for byte as it was,
and no cache made.

The cases are a table: matrix.yaml texts, build.toml texts, arguments of every subcommand, and
output, cache and lock folders in states they should never be in."""

from __future__ import annotations

import os
import signal
import stat
from pathlib import Path
from typing import Any

import pytest

from ..support.factory import factory_main, snapshot
from ..support.hostile import CASES

SECRETS = ("pw-s3cret", "hf_s3cretTOKEN", "S3CRETKEY", "tok-s3cret", "ghp_s3cret")


class _Hang(Exception):
    pass


def _alarm(signum: int, frame: object) -> None:
    raise _Hang


@pytest.fixture
def project(hostile_project: Path) -> Path:
    return hostile_project


@pytest.mark.parametrize("name", list(CASES))
def test_hostile_input(name: Any, project: Path, monkeypatch: pytest.MonkeyPatch,
                       capsys: pytest.CaptureFixture[str]) -> None:
    case = CASES[name]
    if case.matrix is not None:
        target = project / "matrix.yaml"
        target.write_bytes(case.matrix if isinstance(case.matrix, bytes) else
                           case.matrix.encode())
    if case.kernel is not None:
        (project / "demo" / "build.toml").write_text(case.kernel)
    if case.setup is not None:
        case.setup(project)
    for variable, value in case.env:
        monkeypatch.setenv(variable, value)
    tree = _regular_files(project)
    before = snapshot(project / "index") if (project / "index").is_dir() and os.access(
        project / "index", os.R_OK | os.X_OK) else {}
    old_site = snapshot(project / "old-site")
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(30)  # a hang is a failure, not a stuck suite
    try:
        result = factory_main(*case.args, capsys=capsys)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    output = result.stdout + result.stderr
    assert result.exit == case.exit, output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, output
    assert lines[0].startswith("error: ") and "internal error" not in lines[0], lines[0]
    assert case.expected in lines[0], lines[0]
    assert "Traceback" not in output
    assert not any(secret in output for secret in SECRETS), output
    (project / "index").chmod(stat.S_IRWXU) if (project / "index").is_dir() else None
    assert snapshot(project / "index") == before
    assert snapshot(project / "old-site") == old_site
    assert not (project / "cache").exists()
    # Nothing anywhere under the project changed (a log, a record, a page), and so no file
    # can hold a secret; were one written, the secrets are looked for in it too.
    written = {path: data for path, data in _regular_files(project).items()
               if tree.get(path) != data}
    assert not [path for path, data in written.items()
                if any(secret.encode() in data for secret in SECRETS)]
    assert not written, sorted(written)


def _regular_files(folder: Path) -> dict[str, bytes]:
    """Every regular file under `folder` that can be read, with its bytes (links, FIFOs and
    what a case locked are left alone)."""
    found = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = Path(root) / name
            try:
                if stat.S_ISREG(path.lstat().st_mode):
                    found[str(path.relative_to(folder))] = path.read_bytes()
            except OSError:
                continue
    return found
