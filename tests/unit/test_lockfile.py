"""matrix.lock: written and read back, and every error pointing at the right [[kernel]] (the
position finder tells the tables of an array of tables apart). Pure: files only."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from factory.config.lockfile import (
    Locked,
    LockedWheelhouse,
    check_wheelhouses,
    lock_location,
    lock_path,
    pin_for,
    read,
    read_wheelhouses,
    render,
    unused,
    write,
)
from factory.config.matrix import load_matrix
from factory.config.model import KernelEntry, SourceRequest
from factory.config.nodes import load_toml
from factory.config.wheelhouse import wheelhouse_digest
from factory.errors import ConfigError

from ..support.checks import present
from ..support.cli import GOOD_KERNEL, SOURCES
from ..support.factory import make_kernel

ENTRIES = [
    Locked("relu", "git", "https://example.com/k.git", "relu", "main", "a" * 40, "b" * 64,
           "1.0.0"),
    Locked("img2gray", "path", "examples/img2gray", None, None, "c" * 64, "c" * 64, "1.0.0"),
    Locked("tiny", "hub", "org/tiny", None, "v1.2.0", "d" * 40, "e" * 64, "1.2.0"),
]


def test_a_lock_reads_back_what_was_written(tmp_path: Path) -> None:
    path = lock_path(tmp_path / "matrix.yaml")
    assert path.name == "matrix.lock"
    assert write(path, render(tmp_path / "matrix.yaml", ENTRIES)) is True
    assert write(path, render(tmp_path / "matrix.yaml", ENTRIES)) is False  # unchanged
    locked = read(path)
    fields = ("name", "kind", "location", "subdir", "requested", "commit", "tree", "version")
    assert [[getattr(pin, f) for f in fields] for pin in locked.values()] == \
        [[getattr(pin, f) for f in fields] for pin in ENTRIES]
    # each pin knows its own [[kernel]] table's line, not the first one's
    lines = path.read_text().splitlines()
    assert [lines[present(pin.line) - 1] for pin in locked.values()] == ["[[kernel]]"] * 3
    assert len({pin.line for pin in locked.values()}) == 3


def test_an_error_in_the_second_kernel_names_its_own_line(tmp_path: Path) -> None:
    path = lock_path(tmp_path / "matrix.yaml")
    text = render(tmp_path / "matrix.yaml", ENTRIES).replace('kind = "path"', 'kind = "svn"')
    path.write_text(text)
    line = text.splitlines().index('kind = "svn"') + 1
    with pytest.raises(ConfigError) as caught:
        read(path)
    assert (caught.value.line, caught.value.key) == (line, "kernel[1].kind")
    assert "unknown source kind 'svn'" in caught.value.message


def test_keys_of_nested_arrays_of_tables_get_their_own_lines(tmp_path: Path) -> None:
    path = tmp_path / "x.toml"
    path.write_text('[[a]]\nx = 1\n[[a]]\nx = 2\n[a.b]\ny = 3\n[[a.c]]\nz = 4\n[[a.c]]\nz = 5\n')
    root = load_toml(path)
    first, second = root.mapping()["a"].list()
    assert (first.mapping()["x"].line, second.mapping()["x"].line) == (2, 4)
    assert second.mapping()["b"].mapping()["y"].line == 6
    assert [c.mapping()["z"].line for c in second.mapping()["c"].list()] == [8, 10]


def test_a_pin_answers_for_its_entry_and_refuses_a_moved_request(tmp_path: Path) -> None:
    path = lock_path(tmp_path / "matrix.yaml")
    write(path, render(tmp_path / "matrix.yaml", ENTRIES))
    locked = read(path)
    entry = KernelEntry(SourceRequest("git", "https://example.com/k.git", "main", "relu"),
                        None, 3)
    assert pin_for(entry, locked, path, tmp_path / "matrix.yaml").commit == "a" * 40
    moved = KernelEntry(SourceRequest("git", "https://example.com/k.git", "dev", "relu"), None, 3)
    with pytest.raises(ConfigError, match=r"asks for 'dev' but matrix\.lock was written for "
                                          r"'main'"):
        pin_for(moved, locked, path, tmp_path / "matrix.yaml")
    assert [pin.name for pin in unused([entry], locked)] == ["img2gray", "tiny"]


def test_a_locked_wheelhouse_must_hold_the_wheels_it_was_locked_with(tmp_path: Path) -> None:
    """`factory build --locked` tests with exactly the wheels the lock names: a wheelhouse not
    in the lock, or whose wheels changed, is refused in one line naming the matrix's key."""
    wheelhouse = tmp_path / "wh"
    wheelhouse.mkdir()
    with zipfile.ZipFile(wheelhouse / "einops-0.8.2-py3-none-any.whl", "w") as archive:
        archive.writestr("einops-0.8.2.dist-info/METADATA",
                         "Metadata-Version: 2.1\nName: einops\nVersion: 0.8.2\n")
    make_kernel(tmp_path / "demo", GOOD_KERNEL, SOURCES, package="demo")
    matrix_path = tmp_path / "matrix.yaml"
    matrix_path.write_text('kernels: [{path: demo, version: 1.0}]\ntorch: ["2.11"]\n'
                           'cuda: {"13.0": {sms: ["9.0"]}}\nwheelhouse: wh\n')
    matrix = load_matrix(matrix_path)
    with pytest.raises(ConfigError, match=r"wheelhouse wh is not in matrix\.lock"):
        check_wheelhouses(matrix)
    pin = LockedWheelhouse(lock_location(wheelhouse, matrix_path), wheelhouse_digest(wheelhouse))
    write(lock_path(matrix_path), render(matrix_path, ENTRIES, wheelhouses=[pin]))
    assert read_wheelhouses(lock_path(matrix_path))["wh"].digest == pin.digest
    check_wheelhouses(matrix)
    (wheelhouse / "einops-0.8.2-py3-none-any.whl").rename(
        wheelhouse / "einops-0.8.3-py3-none-any.whl")
    with pytest.raises(ConfigError) as changed:
        check_wheelhouses(matrix)
    assert changed.value.line == 4 and changed.value.key == "wheelhouse"
    assert "holds other wheels than when matrix.lock was written" in changed.value.message

