"""A cell's state in the output folder: one codec for run.py's writers and readers; a state
written before the format was named reads as format 1, anything else as none."""

from __future__ import annotations

import json
import string
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from factory.cells.state import STATE_FORMAT, CellState
from factory.prove.load import LoadReport, OpReport
from factory.prove.tests import TestReport

text = st.text(string.ascii_letters + string.digits + "._-+:", max_size=16)
states = st.builds(
    CellState, text, text, text,
    st.none() | st.builds(LoadReport, text, st.lists(text, max_size=2).map(tuple),
                          st.lists(st.builds(OpReport, text, st.booleans(),
                                             st.lists(text, max_size=3).map(tuple),
                                             st.booleans(), st.none() | text),
                                   max_size=3).map(tuple), st.none() | text),
    st.none() | st.builds(TestReport, st.integers(0, 10**4), st.integers(0, 10**4),
                          st.integers(0, 10**4), st.integers(0, 10**4),
                          st.lists(text, max_size=2).map(tuple),
                          st.floats(0, 10**5, allow_nan=False), text, text),
    st.none() | st.integers(0, 2**40), st.booleans())


@given(states)
def test_every_state_survives_its_file(tmp_path_factory: pytest.TempPathFactory,
                                       state: CellState) -> None:
    path = tmp_path_factory.mktemp("state") / "cell.json"
    state.write(path)
    assert CellState.read(path) == state
    assert json.loads(path.read_text())["format"] == STATE_FORMAT


def test_a_state_written_before_the_format_was_named_still_reads(tmp_path: Path) -> None:
    path = tmp_path / "cell.json"
    path.write_text(json.dumps({"fingerprint": "f" * 64, "wheel": "x-1.0-py3-none-any.whl",
                                "sha256": "a" * 64, "loaded": None, "tests": None,
                                "installed_size": 12}))
    assert CellState.read(path) == CellState("f" * 64, "x-1.0-py3-none-any.whl", "a" * 64,
                                             installed_size=12)


def test_a_damaged_or_foreign_state_reads_as_none(tmp_path: Path) -> None:
    path = tmp_path / "cell.json"
    assert CellState.read(path) is None  # none written yet
    for text in ("{", "[]", json.dumps({"format": 2, "fingerprint": "f", "wheel": "w",
                                         "sha256": "s"}),
                 json.dumps({"fingerprint": "f", "wheel": None, "sha256": "s"})):
        path.write_text(text)
        assert CellState.read(path) is None, text


def test_a_state_says_when_the_kernels_code_ran_unconfined(tmp_path: Path) -> None:
    """Written only when it did; anything but true reads as confined."""
    path = tmp_path / "cell.json"
    CellState("f" * 64, "x-1.0-py3-none-any.whl", "a" * 64, unconfined=True).write(path)
    assert json.loads(path.read_text())["unconfined"] is True
    CellState("f" * 64, "x-1.0-py3-none-any.whl", "a" * 64).write(path)
    assert "unconfined" not in json.loads(path.read_text())
    path.write_text(json.dumps({"fingerprint": "f", "wheel": "w", "sha256": "s",
                                "unconfined": "yes"}))
    state = CellState.read(path)
    assert state is not None and state.unconfined is False
