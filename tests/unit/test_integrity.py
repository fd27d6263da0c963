"""What a release must survive: links out of the output folder, stray and damaged files, files
tampered with behind the index's back, a moved matrix, an empty yank reason, and runs killed
half-way. Each test names the promise of docs/promises.md it holds."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from factory.cells import run as build_run
from factory.errors import BuildError
from factory.outputs.files import file_sha256
from factory.outputs.layout import Layout

from ..support.wheels import make_wheel


def test_a_bug_is_one_line_with_credentials_masked(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """An unexpected exception (a bug) is one line, masked; the traceback only on request."""
    from factory.cli import index as index_command
    from factory.cli import main

    def broken(args: object, console: object) -> int:
        raise RuntimeError("cannot reach https://ci:pw-s3cret-1@example.invalid/?token=tok-99")

    monkeypatch.setattr(index_command, "run", broken)
    assert main(["index"]) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "error: internal error (RuntimeError: cannot reach https://***@example.invalid/?token=***)"
        "; this is a bug in kernel-wheel-factory: please report it, with the traceback that "
        "KERNEL_WHEEL_FACTORY_DEBUG=1 prints"]
    monkeypatch.setenv("KERNEL_WHEEL_FACTORY_DEBUG", "1")
    assert main(["index"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "pw-s3cret-1" not in err and "tok-99" not in err


def test_a_rebuild_over_a_tampered_wheel_says_so(tmp_path: Path) -> None:
    files = tmp_path / "files"
    files.mkdir()
    published = make_wheel(files, "demo", "1.0+cu130torch211")
    published_sha = file_sha256(published)
    staging = tmp_path / "staging"
    staging.mkdir()
    rebuilt = staging / published.name
    rebuilt.write_bytes(published.read_bytes())
    published.write_bytes(published.read_bytes() + b"tampered")
    with pytest.raises(BuildError, match=r"was changed after it was published \(sha256 "
                       f"{published_sha[:12]}, now [0-9a-f]{{12}}\\), and this build gives the "
                       "published bytes again: restore the file"):
        build_run._publish(rebuilt, published_sha, Layout(tmp_path), bytes(32), "demo/x",
                           False, published_sha)
    other = staging / "other.whl"
    other.write_bytes(b"new bytes")
    os.replace(other, rebuilt)
    with pytest.raises(BuildError, match="raise the kernel's version"):
        build_run._publish(rebuilt, file_sha256(rebuilt), Layout(tmp_path), bytes(32),
                           "demo/x", False, file_sha256(published))
