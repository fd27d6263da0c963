"""The object cache, the compile budget and unit costs, without a compiler: objects are keyed by
the files they were made from, checked before use, bounded, handed between machines; compilers
are admitted as cores and memory allow, measured, and stopped; shards are cut the same way on
every machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from factory.compile.costbook import CostBook, known_costs
from factory.compile.objects import (
    compilers_identity,
    unit_identity,
)
from factory.compile.pool import (
    Budget,
    CompilePool,
    Stopped,
    TimeLimitReached,
)
from factory.errors import BuildError
from factory.plan.costs import (
    UnitCost,
    cell_work,
    cost_key,
    estimated_seconds,
    shard_count,
    shard_of,
    unit_memory,
)

from ..support.factory import FIXTURES, write
from ..support.objects import NS, GiB
from ..support.objects import file_log as _log
from ..support.plans import plan_for


def driver_says(compiler: Path | str) -> tuple[str, str]:
    """A real host compiler's --version and its driver's commands for a compile."""
    def ask(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(compiler), *argv], capture_output=True, text=True, check=True)

    return (ask("--version").stdout,
            ask("-###", "-c", "-x", "c++", "/dev/null", "-o", "/dev/null").stderr)


def test_a_host_compiler_that_only_links_otherwise_keeps_the_objects(tmp_path: Path) -> None:
    """A wrapper adding -static-libstdc++ compiles exactly as g++ does: switching between
    them (to pass the libstdc++ gate) keeps every object; one adding a compile option does
    not."""
    links = write(tmp_path / "links", '#!/bin/sh\nexec g++ -static-libstdc++ "$@"\n')
    compiles = write(tmp_path / "compiles", '#!/bin/sh\nexec g++ -DWRAPPED=1 "$@"\n')
    links.chmod(0o755)
    compiles.chmod(0o755)

    def identity(cxx: str) -> str:
        version, driver = driver_says(cxx)
        said = compilers_identity(["nvcc 13.0", version], driver)
        return unit_identity(["nvcc", "-c", "a.cu", f"-ccbin={cxx}"], said, NS, cxx)

    plain = identity("g++")
    assert identity(str(links)) == plain
    assert identity(str(compiles)) != plain
    assert "WRAPPED=1" in driver_says(compiles)[1]


def test_a_compiler_running_at_the_time_limit_may_finish_within_the_grace(tmp_path: Path) -> None:
    log, _ = _log(tmp_path)
    pool = CompilePool(Budget(1, GiB), deadline=time.monotonic() + 0.3, grace=5)
    done = pool.run([sys.executable, "-c", "import time; time.sleep(1.5)"], tmp_path, log,
                    "sleeping")
    assert done.seconds >= 1.5  # ended by itself, 1.2 s past the limit
    late = CompilePool(Budget(1, GiB), deadline=time.monotonic() + 1, grace=0.5)
    started = time.monotonic()
    with pytest.raises(TimeLimitReached) as stopped:
        late.run([sys.executable, "-c", "import time; time.sleep(30)"], tmp_path, log,
                 "sleeping")
    assert time.monotonic() - started < 10
    # started before the limit, stopped when the grace after it ended: it ran the grace at
    # least, however long the machine took to start it
    assert stopped.value.ran is not None and 0.5 <= stopped.value.ran < 10


def test_a_compiler_is_measured(tmp_path: Path) -> None:
    log, _ = _log(tmp_path)
    pool = CompilePool(Budget(1, GiB))
    done = pool.run([sys.executable, "-c", "x = bytearray(300 * 2**20)"], tmp_path, log,
                    "allocating")
    assert done.peak is not None and done.peak > 300 * 2**20
    with pytest.raises(BuildError, match=r"failing failed \(exit 3\): boom"):
        pool.run([sys.executable, "-c", "print('boom'); raise SystemExit(3)"], tmp_path, log,
                 "failing")


@pytest.mark.parametrize("how", ["stop", "time limit"])
def test_a_stopped_compiler_and_its_children_end_at_once(tmp_path: Path, how: str) -> None:
    log, _ = _log(tmp_path)
    pool = CompilePool(Budget(1, GiB), deadline=time.monotonic() + 1 if how != "stop" else None)
    marker = tmp_path / "child.pid"
    script = (f"import subprocess, time; p = subprocess.Popen(['sleep', '60']); "
              f"open({str(marker)!r}, 'w').write(str(p.pid)); time.sleep(60)")
    if how == "stop":
        threading.Timer(1.0, pool.stop).start()
    started = time.monotonic()
    with pytest.raises(Stopped if how == "stop" else TimeLimitReached):
        pool.run([sys.executable, "-c", script], tmp_path, log, "sleeping")
    assert time.monotonic() - started < 10
    child = int(marker.read_text())
    time.sleep(0.2)
    assert not Path(f"/proc/{child}").exists() or \
        Path(f"/proc/{child}/stat").read_text().split()[2] == "Z"  # the grandchild too


# -- costs and shards ----------------------------------------------------------------------------

MANY_UNITS = f"""
    kernels:
      - path: {FIXTURES / "many-units"}
        version: 1.0.0
    torch: ["2.11"]
    cuda:
      "13.0":
        sms: ["9.0"]
    """


def test_shards_cover_every_unit_once_the_same_way_every_time(tmp_path: Path) -> None:
    (cell,) = plan_for(tmp_path, MANY_UNITS).cells
    shards = shard_of(cell, 3)
    compiled_units = {unit.source for unit in cell.units if unit.compiled}
    assert len(compiled_units) == 9 and "csrc/parts.h" not in compiled_units
    assert set().union(*shards) == compiled_units
    assert sum(len(shard) for shard in shards) == 9 and all(len(s) == 3 for s in shards)
    assert shard_of(cell, 3) == shards
    assert shard_count(cell_work(cell)[1], 60, 4, 9) == 3
    assert shard_count(cell_work(cell)[1], 10**6, 4, 9) == 1
    assert shard_count(10**9, 1, 1, 9) == 9  # never more shards than units


def test_an_unmeasured_unit_costs_what_the_measured_units_most_like_it_cost(tmp_path: Path) -> None:
    (cell,) = plan_for(tmp_path, MANY_UNITS).cells
    unit = next(u for u in cell.units if u.source == "csrc/part3.cu")
    split = replace(unit, source="src/flash_fwd_split_hdim128_fp16_sm80.cu")
    book = {f"other-cell/src/{source}": UnitCost(seconds, 3 * GiB, 1) for source, seconds in [
        ("flash_fwd_hdim128_fp16_sm80.cu", 250.0), ("flash_fwd_hdim128_bf16_sm80.cu", 270.0),
        ("flash_bwd_hdim64_fp16_sm80.cu", 300.0), ("flash_fwd_hdim128_fp16_sm80.cpp", 9.0)]}
    # the closest names (6 of 7 words shared) decide; the C++ unit and the backward one do not
    assert estimated_seconds(cell, split, book) == 250.0
    assert unit_memory(cell, split, 1, book) == 3 * GiB
    # nothing alike measured (no half of the words shared): the size-based estimate
    other = replace(unit, source="src/rotary_embedding.cu")
    assert estimated_seconds(cell, other, book) == estimated_seconds(cell, other)


def test_a_unit_starts_before_a_time_limit_only_if_the_slowest_like_it_would_end(
        tmp_path: Path) -> None:
    """natten's generated fna/source_N.cu files are one family by name, but those holding
    kernels of this arch took 220 s and the others 25 s: the mean would start a 220-s unit
    with a minute left. The decision to start takes the slowest of the family; the order and
    the plan keep the mean; a unit's own measurement decides both."""
    (cell,) = plan_for(tmp_path, MANY_UNITS).cells
    unit = next(u for u in cell.units if u.source == "csrc/part3.cu")
    fna = replace(unit, source="csrc/autogen/src/cuda/fna/source_31.cu")
    book = {f"natten-cell/csrc/autogen/src/cuda/fna/source_{number}.cu": UnitCost(seconds, None, 1)
            for number, seconds in [(15, 26.0), (16, 24.0), (28, 217.0), (30, 220.0)]}
    assert estimated_seconds(cell, fna, book) == (26.0 + 24.0 + 217.0 + 220.0) / 4
    assert estimated_seconds(cell, fna, book, slowest=True) == 220.0
    book[cost_key(cell, fna)] = UnitCost(30.0, None, 1)
    assert estimated_seconds(cell, fna, book, slowest=True) == \
        estimated_seconds(cell, fna, book) == 30.0
    assert estimated_seconds(cell, unit, slowest=True) == estimated_seconds(cell, unit)


def test_a_numbered_unit_is_estimated_from_its_siblings_not_from_another_familys_namesake(
        tmp_path: Path) -> None:
    """natten's hopper_fna_bwd/source_2.cu shares all its words but one with
    hopper_fna/source_2.cu (forward, 350 s) and all but its number with hopper_fna_bwd/source_0
    and source_1 (672 s and 694 s, measured): a number names a member of a family, so the
    siblings decide."""
    (cell,) = plan_for(tmp_path, MANY_UNITS).cells
    unit = next(u for u in cell.units if u.source == "csrc/part3.cu")
    bwd = replace(unit, source="csrc/autogen/src/cuda/hopper_fna_bwd/source_2.cu")
    generated = "natten-cell/csrc/autogen/src/cuda"
    book = {f"{generated}/hopper_fna/source_2.cu": UnitCost(350.0, None, 1),
            f"{generated}/hopper_fna_bwd/source_0.cu": UnitCost(672.0, 10 * GiB, 1),
            f"{generated}/hopper_fna_bwd/source_1.cu": UnitCost(694.0, 9 * GiB, 1)}
    assert estimated_seconds(cell, bwd, book) == (672.0 + 694.0) / 2
    assert estimated_seconds(cell, bwd, book, slowest=True) == 694.0
    assert unit_memory(cell, bwd, 1, book) == 10 * GiB


def test_a_unit_stopped_at_a_time_limit_is_known_to_take_longer(tmp_path: Path) -> None:
    """natten's hopper_fna_bwd units, estimated from their forward siblings (about 350 s),
    were started with 6 minutes left and stopped at 396 s: the book keeps that bound, and a
    unit is then estimated at least at it (or at its siblings' figure, when that is more); its
    measurement, once it finishes, replaces the bound."""
    (cell,) = plan_for(tmp_path, MANY_UNITS).cells
    unit = next(u for u in cell.units if u.source == "csrc/part3.cu")
    bwd = replace(unit, source="csrc/autogen/src/cuda/hopper_fna_bwd/source_0.cu")
    book = {f"{cell.key}/csrc/autogen/src/cuda/hopper_fna/source_{number}.cu":
            UnitCost(seconds, None, 1) for number, seconds in [(3, 303.0), (5, 351.0)]}
    assert estimated_seconds(cell, bwd, book, slowest=True) == 351.0
    book[cost_key(cell, bwd)] = UnitCost(396.0, None, 1, at_least=True)
    assert estimated_seconds(cell, bwd, book) == estimated_seconds(cell, bwd, book,
                                                                   slowest=True) == 396.0
    book[cost_key(cell, bwd)] = UnitCost(60.0, None, 1, at_least=True)  # stopped early on
    assert estimated_seconds(cell, bwd, book) == (303.0 + 351.0) / 2
    assert estimated_seconds(cell, bwd, book, slowest=True) == 351.0
    del book[f"{cell.key}/csrc/autogen/src/cuda/hopper_fna/source_3.cu"]
    book["other-cell/csrc/autogen/src/cuda/hopper_fna_bwd/source_0.cu"] = \
        UnitCost(420.0, None, 1, at_least=True)  # another cell's bound of the same source
    del book[cost_key(cell, bwd)]
    assert estimated_seconds(cell, bwd, book) == 420.0
    store = CostBook(tmp_path / "book")
    store.record("natten", {cost_key(cell, bwd): UnitCost(396.0, None, 1, at_least=True)})
    assert store.read("natten")[cost_key(cell, bwd)].at_least
    store.record("natten", {cost_key(cell, bwd): UnitCost(512.0, 2**30, 1)})
    assert store.read("natten")[cost_key(cell, bwd)] == UnitCost(512.0, 2**30, 1)
    assert '"at_least"' not in (tmp_path / "book" / "natten.json").read_text()


def test_costs_measured_earlier_decide_the_estimates(tmp_path: Path) -> None:
    (cell,) = plan_for(tmp_path, MANY_UNITS).cells
    unit = next(u for u in cell.units if u.source == "csrc/part3.cu")
    assert unit_memory(cell, unit, 2) == 8 * GiB  # the default: 4 GiB per nvcc thread
    book = CostBook(tmp_path / "costs")
    book.record("many-units", {cost_key(cell, unit): UnitCost(12.0, GiB // 2, 1)})
    costs = book.read("many-units")
    assert unit_memory(cell, unit, 2, costs) == GiB
    assert cell_work(cell, costs)[1] < cell_work(cell)[1] and \
        json.loads((tmp_path / "costs" / "many-units.json").read_text())[cost_key(cell, unit)][
            "seconds"] == 12.0


def test_a_cost_book_travels_out_with_exported_objects_and_in_with_imported_ones(
        tmp_path: Path) -> None:
    (cell,) = plan_for(tmp_path, MANY_UNITS).cells
    keys = sorted(cost_key(cell, unit) for unit in cell.units if unit.compiled)
    shard = CostBook(tmp_path / "shard")
    shard.record("many-units", {key: UnitCost(100.0 + n, GiB, 1) for n, key in enumerate(keys)})
    assert shard.export(["many-units", "never-built"], tmp_path / "artifact") == 9
    local = CostBook(tmp_path / "local")
    local.record("many-units", {keys[0]: UnitCost(7.0, None, 1)})
    # hostile or broken files in an artifact are left out, never read as a book
    artifact = tmp_path / "artifact"
    (artifact / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (artifact / "..hidden.json").write_text("{}")
    (artifact / "link.json").symlink_to(artifact / "many-units.json")
    (artifact / "bad.json").write_text('{"x": {"seconds": "soon"}}')
    os.mkfifo(artifact / "fifo.json")
    assert local.merge(artifact) == 8  # what the local book lacked
    book = local.read("many-units")
    assert book[keys[0]].seconds == 7.0 and book[keys[1]].seconds == 101.0
    assert [path.name for path in (tmp_path / "local").glob("*.json")] == ["many-units.json"]
    assert CostBook(artifact).read("deep") == {} and CostBook(artifact).read("link") == {}


def test_a_matrixs_cost_book_is_read_below_the_machines_and_cuts_the_shards(tmp_path: Path) -> None:
    (cell,) = plan_for(tmp_path, MANY_UNITS).cells
    sources = sorted(unit.source for unit in cell.units if unit.compiled)
    committed = CostBook(tmp_path / "committed")
    # one unit measured at ten times any other: it gets a shard of its own
    heavy = sources[0]
    committed.record("many-units", {cost_key(cell, unit): UnitCost(
        1000.0 if unit.source == heavy else 100.0, None, 1) for unit in cell.units
        if unit.compiled})
    mine = CostBook(tmp_path / "mine")
    mine.record("many-units", {f"{cell.key}/{heavy}": UnitCost(900.0, None, 1)})
    known = known_costs("many-units", (committed, None, mine))
    assert known[f"{cell.key}/{heavy}"].seconds == 900.0
    assert known[f"{cell.key}/{sources[1]}"].seconds == 100.0
    shards = shard_of(cell, 3, committed.read("many-units"))
    assert {heavy} in shards and sorted(len(shard) for shard in shards) == [1, 4, 4]
    assert shard_of(cell, 3, committed.read("many-units")) == shards  # the same every time
