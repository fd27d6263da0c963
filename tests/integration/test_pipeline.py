"""The pipeline: what a command does from a request to an exit status, speaking through a voice
and printing nothing itself."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest

from factory.cells.run import CellTests
from factory.config.matrix import load_matrix
from factory.errors import ConfigError
from factory.pipeline.build import only_cells
from factory.pipeline.load import plan_matrix
from factory.pipeline.options import Given
from factory.pipeline.test import TestRequest, run_kernel_tests
from factory.pipeline.voice import Voice

from ..support.checks import present
from ..support.factory import REPO, root_label, run_factory


class RecordingVoice:
    """A voice that keeps what it is told."""

    def __init__(self) -> None:
        self.notes: list[str] = []
        self.warnings: list[str] = []
        self.shown: list[tuple[list[CellTests], bool]] = []
        self.reporter = None

    def note(self, text: str) -> None:
        self.notes.append(text)

    def warn(self, text: str) -> None:
        self.warnings.append(text)

    def tested(self, entries: list[CellTests], require_gpu: bool) -> None:
        self.shown.append((entries, require_gpu))


def test_factory_test_speaks_through_its_voice_and_prints_nothing(tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A cell with no published wheel: its tests cannot run, the voice is told so (and which
    runner and why), the exit status is 1, and nothing reaches stdout or stderr."""
    out = tmp_path / "out"
    out.mkdir()
    voice = RecordingVoice()
    request = TestRequest(matrix=REPO / "matrix.yaml", out=out, cache=tmp_path / "cache",
                          given=Given(runner="local", build_root=tmp_path / "build"),
                          locked=True)
    assert run_kernel_tests(request, cast(Voice, voice)) == 1
    assert voice.notes == ["runner: local (asked for)"]
    ((entries, require_gpu),) = voice.shown
    assert require_gpu is False
    (entry,) = entries
    assert entry.cell_id == f"img2gray/{root_label()}/x86_64" and entry.report is None
    assert present(entry.detail).startswith("no wheel of this cell is published")
    assert capsys.readouterr() == ("", "")


def test_only_globs_that_match_no_cell_name_the_cells(tmp_path: Path) -> None:
    plan = plan_matrix(load_matrix(REPO / "matrix.yaml"), tmp_path / "cache", lambda text: None,
                       locked=True)
    assert only_cells(plan, ()) is plan
    assert [cell.id for cell in only_cells(plan, ("img2gray/*",)).cells] == \
        [f"img2gray/{root_label()}/x86_64"]
    with pytest.raises(ConfigError) as raised:
        only_cells(plan, ("nope/*",))
    assert str(raised.value).startswith("--only: 'nope/*' matches no cell (cells: img2gray/")


def test_the_committed_lock_is_current(tmp_path: Path) -> None:
    """The example's lock still matches its files: `--locked --offline` plans from it alone."""
    planned = run_factory("plan", "matrix.yaml", "--locked", "--offline", "--cache-dir",
                          tmp_path / "cache", cwd=REPO)
    assert planned.exit == 0, planned.stdout + planned.stderr
    assert f'"img2gray/{root_label()}/x86_64"' in planned.stdout
