"""`factory test`: each cell's kernel tests against its published wheel, their counts recorded
in the index, and an exit status."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from ..cells.run import CellTests, test_cells
from ..index.records import load_manifest
from ..index.update import update_index
from ..outputs.layout import Layout
from ..trust.keys import existing_key
from .build import choose, only_cells, read_matrix
from .load import plan_matrix
from .options import Given
from .voice import Voice, status_of_tests

__all__ = ["TestRequest", "run_kernel_tests"]


@dataclass(frozen=True)
class TestRequest:
    """What `factory test` was asked, every path and value already checked."""

    __test__ = False  # not a test class, whatever pytest's collector thinks of the name

    matrix: Path
    out: Path  # an output folder a build wrote
    cache: Path
    given: Given  # what the command line said of the settings pipeline/options.py settles
    locked: bool = False
    torch_pythons: tuple[Path, ...] = ()
    only: tuple[str, ...] = ()
    require_tests: bool = False  # tests that could not run fail the command
    require_gpu: bool = False


def run_kernel_tests(request: TestRequest, voice: Voice) -> int:
    """Run the tests; the exit status."""
    matrix, options = read_matrix(request.matrix, request.given, request.cache,
                                  request.torch_pythons)
    plan = plan_matrix(matrix, request.cache, voice.warn, request.given.offline, request.locked)
    plan = only_cells(plan, request.only)
    plan, runners = choose(options, plan, voice)
    with runners:
        tested = test_cells(plan, request.out, runners, voice.note, request.require_tests)
    voice.tested(tested, request.require_gpu)
    _record(request.out, tested, existing_key(options.object_key))
    return status_of_tests(tested, request.require_gpu)


def _record(out: Path, tested: list[CellTests], key: bytes | None) -> None:
    """The counts into the index's records of the cells whose wheel was tested."""
    layout = Layout(out)
    if not layout.manifest.is_file():
        return
    recorded = load_manifest(layout.manifest).cells
    outcomes = [replace(recorded[entry.cell_id], tests=entry.report.to_json())
                for entry in tested if entry.report is not None and
                entry.cell_id in recorded and recorded[entry.cell_id].wheel == entry.wheel]
    if outcomes:
        update_index(out, outcomes=outcomes, published={},  # indexes no stray file
                     journal_key=key)
