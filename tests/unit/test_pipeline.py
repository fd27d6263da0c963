"""The pipeline: what a command does from a request to an exit status, speaking through a voice
and printing nothing itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from factory.cells.run import CellTests
from factory.pipeline.voice import status_of_tests
from factory.prove.tests import TestReport


def report(passed: int = 3, failed: int = 0, gpus: tuple[str, ...] = ("H100",)) -> TestReport:
    return TestReport(passed, failed, 0, 0, gpus, 1.0)


UNTESTED = TestReport.untested("the kernel has no tests/ folder")


@pytest.mark.parametrize(("entry", "require_gpu", "failed"), [
    (CellTests("a", "a.whl", report(), None, Path("log")), False, False),
    (CellTests("a", "a.whl", report(failed=1), None, Path("log")), False, True),
    (CellTests("a", "a.whl", report(gpus=()), None, Path("log")), False, False),
    (CellTests("a", "a.whl", report(gpus=()), None, Path("log")), True, True),
    # nothing ran: untested, which fails the run only where tests are required
    (CellTests("a", "a.whl", report(passed=0), None, Path("log")), False, False),
    (CellTests("a", "a.whl", report(passed=0), None, Path("log"), required=True), False, True),
    (CellTests("a", "a.whl", UNTESTED, None, Path("log")), True, False),
    (CellTests("a", "a.whl", UNTESTED, None, Path("log"), required=True), False, True),
    (CellTests("a", None, None, "no wheel", Path("log")), False, True),
])
def test_when_a_cells_tests_count_as_failed(entry: Any, require_gpu: bool, failed: bool) -> None:
    assert entry.failed(require_gpu) is failed
    assert status_of_tests([entry], require_gpu) == int(failed)
    passing = CellTests("b", "b.whl", report(), None, Path("log"))
    assert status_of_tests([passing, entry], require_gpu) == int(failed)
