"""Builds killed at random moments, and builds side by side: after a SIGKILL anywhere in a
build of two cells (planning, compiling, the gates, the move into files/ and the cell's record,
the index update at the end) the next build into the same folder succeeds and gives the same
bytes as an uninterrupted one, and two builds started at once into one folder both succeed with
every wheel indexed. (benchmarks/kills.py runs more of them and counts.)"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from ..conftest import EXAMPLE, cache_env, write

pytestmark = [pytest.mark.slow, pytest.mark.network]


def build(matrix, out, cache) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "factory", "build", str(matrix), "--out",
                             str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, **cache_env(cache)})


def finished(process: subprocess.Popen[str]) -> int:
    _, stderr = process.communicate()
    assert process.returncode == 0, stderr
    return process.returncode


def published(out) -> dict[str, str]:
    """The wheels in files/, each with its sha256, all of them recorded by the index."""
    found = {path.name: hashlib.sha256(path.read_bytes()).hexdigest()
             for path in (out / "files").glob("*.whl")}
    recorded = {row[0]: row for row in json.loads(
        (out / ".factory" / "manifest.json").read_text())["files"]}
    assert set(found) == set(recorded)
    return found


def test_a_killed_build_never_blocks_the_next_and_two_at_once_both_succeed(tmp_path,
                                                                           factory_cache):
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
        process = build(matrix, out, factory_cache)
        try:
            process.wait(timeout=rng.uniform(0.5, seconds))
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGKILL)
            landed += 1
        process.communicate()
        finished(build(matrix, out, factory_cache))
        assert published(out) == expected
    assert landed >= 3, f"only {landed} of 6 kills landed before the build ended"

    for pair in range(3):
        out = tmp_path / f"pair{pair}"
        first, second = build(matrix, out, factory_cache), build(matrix, out, factory_cache)
        finished(first)
        finished(second)
        assert published(out) == expected
