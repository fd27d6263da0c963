"""Builds, indexes and merges killed at random moments, and builds side by side: after a
SIGKILL anywhere in a build of two cells (planning, compiling, the gates, the move into files/
and the cell's record, the index update at the end) the next build into the same folder
succeeds and gives the same bytes as an uninterrupted one, as does the next `factory index` or
`factory index --merge` after one killed; two builds started at once into one folder both
succeed with every wheel indexed. (benchmarks/kills.py runs more of them and counts.)"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ..support.factory import EXAMPLE, cache_env, write
from ..support.wheels import make_wheel

pytestmark = [pytest.mark.slow, pytest.mark.network]


def build(matrix: Path, out: Path, cache: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "factory", "build", str(matrix), "--out",
                             str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, **cache_env(cache)})


def finished(process: subprocess.Popen[str]) -> int:
    _, stderr = process.communicate()
    assert process.returncode == 0, stderr
    return process.returncode


def killed(process: subprocess.Popen[str], after: float) -> bool:
    """Whether the process was still running `after` seconds on, and so was killed."""
    try:
        process.wait(timeout=after)
        return False
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGKILL)
        return True
    finally:
        process.communicate()


def published(out: Path) -> dict[str, str]:
    """The wheels in files/, each with its sha256, all of them recorded by the index."""
    found = {path.name: hashlib.sha256(path.read_bytes()).hexdigest()
             for path in (out / "files").glob("*.whl")}
    recorded = {row[0]: row for row in json.loads(
        (out / ".factory" / "manifest.json").read_text())["files"]}
    assert set(found) == set(recorded)
    return found


def test_a_killed_build_never_blocks_the_next_and_two_at_once_both_succeed(tmp_path: Path,
        factory_cache: Path) -> None:
    # two cells that finish at different moments and are indexed together at the end
    matrix = write(tmp_path / "matrix.yaml", f"""
        kernels: [{{path: {EXAMPLE}, version: 1.0.0}}]
        torch: ["2.11", "2.15"]
        cuda: {{follow: torch, sms: ["9.0"]}}
        runner: local
    """)
    finished(build(matrix, tmp_path / "warm", factory_cache))  # objects into the cache
    start = time.monotonic()
    finished(build(matrix, tmp_path / "reference", factory_cache))
    seconds = time.monotonic() - start
    expected = published(tmp_path / "reference")

    rng = random.Random(7)
    landed = 0
    for run in range(6):
        out = tmp_path / f"kill{run}"
        landed += killed(build(matrix, out, factory_cache), rng.uniform(0.5, seconds))
        finished(build(matrix, out, factory_cache))
        assert published(out) == expected
    assert landed >= 3, f"only {landed} of 6 kills landed before the build ended"

    for pair in range(3):
        out = tmp_path / f"pair{pair}"
        first, second = build(matrix, out, factory_cache), build(matrix, out, factory_cache)
        finished(first)
        finished(second)
        assert published(out) == expected


def every_published_byte(out: Path) -> dict[str, str]:
    """Every file of an output folder but its private records, with its sha256."""
    return {str(path.relative_to(out)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(out.rglob("*")) if path.is_file()
            and path.relative_to(out).parts[0] not in (".factory", "logs")}


def factory(*args: str | Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "factory", *map(str, args)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def test_a_killed_index_or_merge_never_blocks_the_next(tmp_path: Path) -> None:
    """`factory index` over 300 wheels put in files/ by hand, and `factory index --merge` of two
    jobs, each killed at random moments: the command run again succeeds with every published
    byte of an uninterrupted run."""
    hand = tmp_path / "hand"
    for number in range(300):
        make_wheel(hand / "files", f"synthetic-{number % 6}", f"1.0.{number}+cu130torch211")
    jobs = []
    for name, count in (("job1", 150), ("job2", 300)):
        job = tmp_path / name
        (job / "files").mkdir(parents=True)
        for wheel in sorted((hand / "files").iterdir())[count - 150:count]:
            shutil.copy2(wheel, job / "files" / wheel.name)
        finished(factory("index", "--out", job))
        jobs.append(job)
    commands: dict[str, tuple[Callable[[Path], object],
                              Callable[[Path], subprocess.Popen[str]]]] = {
        "index": (lambda out: shutil.copytree(hand, out),
                  lambda out: factory("index", "--out", out)),
        "merge": (lambda out: None,
                  lambda out: factory("index", "--merge", *jobs, "--out", out)),
    }
    rng = random.Random(11)
    for name, (prepare, command) in commands.items():
        reference = tmp_path / f"{name}-reference"
        prepare(reference)
        start = time.monotonic()
        finished(command(reference))
        seconds = time.monotonic() - start
        expected = every_published_byte(reference)
        landed = 0
        for run in range(5):
            out = tmp_path / f"{name}-kill{run}"
            prepare(out)
            started = time.monotonic()
            if killed(command(out), rng.uniform(0.1, seconds)):
                landed += 1
            else:  # it ran faster than the reference did: the next kill comes within this time
                seconds = max(0.2, time.monotonic() - started)
            finished(command(out))
            assert every_published_byte(out) == expected, (name, run)
        assert landed >= 2, f"only {landed} of 5 kills of {name} landed before it ended"
