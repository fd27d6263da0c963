"""Wheel assembly (metadata, RECORD, deterministic bytes) and the fat binary reader."""

from __future__ import annotations

import csv
import io
import subprocess
import sys
import zipfile
from importlib.metadata import distributions
from pathlib import Path

from factory.wheel.assemble import write_wheel
from factory.wheel.inspect import inspect_wheel

from ..support.wheels import EPOCH, METADATA


def test_a_name_with_a_comma_is_quoted_in_record_and_pip_reads_it_right(tmp_path: Path) -> None:
    """RECORD is CSV: a data file named k/a,b.txt must be one quoted field, or pip reads four
    fields, warns, and records a file that does not exist."""
    content = tmp_path / "content"
    (content / "tinygrad_rms" / "k").mkdir(parents=True)
    (content / "tinygrad_rms" / "__init__.py").write_text("x = 1\n")
    (content / "tinygrad_rms" / "k" / "a,b.txt").write_text("weights\n")
    wheel = write_wheel(content, tmp_path / "dist", METADATA, "py3-none-any", purelib=True,
                        epoch=EPOCH)
    with zipfile.ZipFile(wheel) as archive:
        record = archive.read("tinygrad_rms-1.2.0+cu130torch211.dist-info/RECORD").decode()
    rows = {row[0]: row for row in csv.reader(io.StringIO(record))}
    assert all(len(row) == 3 for row in rows.values())
    assert rows["tinygrad_rms/k/a,b.txt"][2] == "8"
    assert inspect_wheel(wheel).record_problems == ()

    target = tmp_path / "target"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index",
                           "--disable-pip-version-check", "--target", target, wheel],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "RECORD" not in done.stdout + done.stderr  # no "more than three elements" warning
    (installed,) = distributions(path=[str(target)])
    files = {str(f): f for f in installed.files or ()}
    assert files["tinygrad_rms/k/a,b.txt"].hash is not None
    assert "tinygrad_rms/k/a" not in files
