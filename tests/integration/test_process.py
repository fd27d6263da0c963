"""Commands whose output the factory reads whole (probes of an interpreter or an image the user
named, the import gate, doctor in another interpreter) are bounded: a program that floods its
output or hangs is killed with its children, and the factory says so in one line. A long
command whose output streams into a log (a kernel's tests) is bounded in time the same way."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from factory.system.engine import Engine
from factory.system.process import (
    Log,
    NotStarted,
    OutputOverflow,
    TimedOut,
    bounded_run,
    run,
    streamed_run,
)

from ..support.cli import GOOD_KERNEL, GOOD_MATRIX, SOURCES
from ..support.factory import factory_main, make_kernel, write


def test_a_flood_is_cut_at_the_limit() -> None:
    started = time.monotonic()
    with pytest.raises(OutputOverflow, match="printed more than 65536 bytes"):
        bounded_run(["yes"], 30, limit=1 << 16)
    assert time.monotonic() - started < 10


def test_a_hung_command_is_killed_with_its_children(tmp_path: Path) -> None:
    marker = tmp_path / "child.pid"
    started = time.monotonic()
    with pytest.raises(TimedOut):
        bounded_run(["sh", "-c", f"sleep 300 & echo $! > {marker}; wait"], 1)
    assert time.monotonic() - started < 10
    child = int(marker.read_text())
    time.sleep(0.2)
    assert not Path(f"/proc/{child}").exists() or \
        Path(f"/proc/{child}/stat").read_text().split()[2] == "Z"


def test_a_streamed_command_is_logged_line_by_line_and_killed_at_its_time(tmp_path: Path) -> None:
    marker = tmp_path / "child.pid"
    with open(tmp_path / "log", "w") as handle:
        log = Log(handle)
        status = streamed_run(["sh", "-c", "echo one; echo two >&2; exit 4"], log, 30)
        started = time.monotonic()
        with pytest.raises(TimedOut):
            # the child holds the output open after its parent is gone
            streamed_run(["sh", "-c", f"echo started; sleep 300 & echo $! > {marker}; wait"],
                         log, 1)
    assert status == 4
    assert time.monotonic() - started < 10
    assert (tmp_path / "log").read_text() == "one\ntwo\nstarted\n"
    child = int(marker.read_text())
    time.sleep(0.2)
    assert not Path(f"/proc/{child}").exists() or \
        Path(f"/proc/{child}/stat").read_text().split()[2] == "Z"


def test_what_a_command_says_comes_back_whole() -> None:
    done = bounded_run([sys.executable, "-c", "import sys; print('out'); print('err', "
                        "file=sys.stderr); sys.exit(3)"], 30)
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n")


def test_a_torch_python_that_floods_is_one_line(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    flood = write(tmp_path / "python", "#!/bin/sh\nexec yes 'torch 2.11'\n")
    flood.chmod(0o755)
    make_kernel(tmp_path / "demo", GOOD_KERNEL, SOURCES, package="demo")
    matrix = write(tmp_path / "matrix.yaml", GOOD_MATRIX)
    started = time.monotonic()
    result = factory_main("plan", matrix, "--torch-python", flood, "--cache-dir",
                          tmp_path / "cache", capsys=capsys)
    assert time.monotonic() - started < 30
    assert result.exit in (1, 2) and len(result.stderr.strip().splitlines()) == 1
    assert "printed more than" in result.stderr


def test_what_a_command_is_given_reaches_it_and_a_missing_one_is_one_error() -> None:
    done = bounded_run(["tr", "a-z", "A-Z"], 30, input="one two\n")
    assert done.stdout == "ONE TWO\n"
    with pytest.raises(NotStarted, match="no-such-program-here cannot be run"):
        bounded_run(["no-such-program-here"], 30)


def test_a_streamed_flood_is_cut_at_its_cap(tmp_path: Path) -> None:
    with open(tmp_path / "log", "w") as handle, \
            pytest.raises(OutputOverflow, match="printed more than 100000 bytes"):
        streamed_run(["yes"], Log(handle), 30, limit=100_000)
    assert (tmp_path / "log").stat().st_size < 200_000


def test_a_logged_step_past_its_time_is_stopped_in_one_line(tmp_path: Path) -> None:
    started = time.monotonic()
    with open(tmp_path / "log", "w") as handle, \
            pytest.raises(TimedOut, match=r"sleeping ran past its time limit \(1 s\)"):
        run(["sleep", "300"], Log(handle), timeout=1, what="sleeping")
    assert time.monotonic() - started < 10


def test_no_program_the_factory_starts_inherits_its_secrets(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The factory reads its credentials in its own process; what it starts (a compiler,
    uv, git, docker, a kernel's code) gets none of them, but for uv's and pip's index
    credentials and a secret given to the program on purpose."""
    inherited = {"HF_TOKEN": "hf_inherited_value", "TWINE_PASSWORD": "twine-inherited",
                 "AWS_SECRET_ACCESS_KEY": "aws-inherited-secret",
                 "KERNEL_WHEEL_FACTORY_OBJECT_KEY": "object-key-value"}
    for name, value in {**inherited, "UV_INDEX_PRIVATE_PASSWORD": "uv-index-password",
                        "PLAIN_SETTING": "kept-as-is"}.items():
        monkeypatch.setenv(name, value)
    seen = bounded_run(["env"], 30).stdout
    assert "UV_INDEX_PRIVATE_PASSWORD=uv-index-password\n" in seen
    assert "PLAIN_SETTING=kept-as-is\n" in seen
    for value in inherited.values():
        assert value not in seen
    given = bounded_run(["env"], 30, env={**os.environ, "MATRIX_API_TOKEN": "given-on-purpose",
                                          "PATH": os.environ["PATH"]}).stdout
    assert "MATRIX_API_TOKEN=given-on-purpose\n" in given
    assert "hf_inherited_value" not in given
    docker = Engine(binary="env")
    with docker:
        assert "hf_inherited_value" not in docker.call([])
