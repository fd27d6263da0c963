"""The object cache, the compile budget and unit costs, without a compiler: objects are keyed by
the files they were made from, checked before use, bounded, handed between machines; compilers
are admitted as cores and memory allow, measured, and stopped; shards are cut the same way on
every machine."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from factory.compile.objects import (
    ObjectCache,
    ObjectStore,
    compilers_identity,
    evict,
    read_depfile,
    unit_identity,
)
from factory.compile.pool import (
    Budget,
    CompilePool,
    Grant,
    Stopped,
    TimeLimitReached,
    grace_for,
    machine_budget,
)
from factory.errors import BuildError
from factory.plan.costs import (
    CostBook,
    UnitCost,
    cell_seconds,
    cost_key,
    estimated_seconds,
    known_costs,
    shard_count,
    shard_of,
    unit_memory,
)
from factory.system.process import Log

from .conftest import FIXTURES, write
from .test_matrix import plan_for

GiB = 2**30
NS = "_demo_abc1234"  # the op namespace of the cells these objects are for


def compiled(work: Path, source: str, body: bytes, headers: dict[str, str]) -> tuple[Path, Path]:
    """What a compiler leaves: an object and a dependency file naming the source and headers
    (some in the build folder, one outside it)."""
    work.mkdir(parents=True, exist_ok=True)
    write(work / "src" / source, "int main;\n")
    for name, text in headers.items():
        write(Path(name) if name.startswith("/") else work / "src" / name, text)
    obj = work / "obj" / (source + ".o")
    obj.parent.mkdir(parents=True, exist_ok=True)
    obj.write_bytes(body)
    names = [str(work / "src" / source), *[n if n.startswith("/") else str(work / "src" / n)
                                           for n in headers]]
    depfile = obj.with_suffix(".d")
    depfile.write_text(f"{obj}: " + " \\\n  ".join(names) + "\n")
    return obj, depfile


@pytest.fixture
def store_setup(tmp_path):
    outside = tmp_path / "toolkit" / "cuda_runtime.h"
    work = tmp_path / "build" / "cell.1"
    obj, depfile = compiled(work, "a.cu", b"\x7fELF object one", {"a.h": "#define A 1\n",
                                                                  str(outside): "// toolkit\n"})
    store = ObjectStore(tmp_path / "objects")
    identity = unit_identity(["nvcc", "-c", f"{work}/src/a.cu", "-o", str(obj)], "nvcc 13",
                             NS)
    key = store.put(identity, "a.cu", work, obj, depfile, work / "src", NS, False)
    return store, identity, key, work, outside


def test_the_namespace_does_not_change_the_identity_but_the_command_does(tmp_path):
    def identity(folder: str, *flags: str, compilers: str = "13", namespace: str = NS) -> str:
        return unit_identity(["nvcc", "-c", f"{folder}/src/a.cu", f"-I{folder}/src",
                              f"-DTORCH_EXTENSION_NAME={namespace}", *flags], compilers,
                             namespace)

    one = identity("/b/cell")
    assert identity("/b/cell", namespace="_demo_fffffff") == one  # an input of its users only
    assert identity("/b/cell", "-O2") != one
    assert identity("/b/cell", compilers="13.1") != one
    # nvcc names internal-linkage symbols after the source's physical path: another build
    # folder makes other bytes, so it is another identity
    assert identity("/elsewhere/cell") != one


def driver_says(compiler: Path | str) -> tuple[str, str]:
    """A real host compiler's --version and its driver's commands for a compile."""
    def ask(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(compiler), *argv], capture_output=True, text=True, check=True)

    return (ask("--version").stdout,
            ask("-###", "-c", "-x", "c++", "/dev/null", "-o", "/dev/null").stderr)


def test_a_host_compiler_that_only_links_otherwise_keeps_the_objects(tmp_path):
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


def test_a_depfile_is_read_as_make_reads_it(tmp_path):
    depfile = write(tmp_path / "a.d", "/w/obj/a.o : /w/src/a.cu \\\n  /w/src/my\\ header.h "
                                      "rel.h \\\n /usr/include/stdio.h\n")
    assert read_depfile(depfile, Path("/w/src")) == [
        Path("/w/src/a.cu"), Path("/w/src/my header.h"), Path("/w/src/rel.h"),
        Path("/usr/include/stdio.h")]


def test_a_unit_is_found_again_by_the_next_build_of_its_cell(store_setup):
    store, identity, key, work, _ = store_setup
    shutil.rmtree(work / "obj")  # the next build starts from a fresh copy of the source
    shutil.rmtree(work / "src")
    compiled(work, "a.cu", b"", {"a.h": "#define A 1\n"})
    target = work / "obj" / "a.cu.o"
    assert store.fetch(identity, work, NS, target, print) == key
    assert target.read_bytes() == b"\x7fELF object one"
    assert store.used == {key: identity}


@pytest.mark.parametrize("changed", ["header", "outside", "source", "gone"])
def test_any_file_the_compiler_read_changing_is_a_miss(store_setup, changed):
    store, identity, _, work, outside = store_setup
    if changed == "header":
        (work / "src" / "a.h").write_text("#define A 2\n")
    elif changed == "outside":
        outside.write_text("// another toolkit\n")
    elif changed == "source":
        (work / "src" / "a.cu").write_text("int main2;\n")
    else:
        (work / "src" / "a.h").unlink()
    assert store.fetch(identity, work, NS, work / "obj" / "again.o", print) is None


def test_a_touched_file_with_the_same_bytes_is_still_a_hit(store_setup):
    store, identity, key, work, _ = store_setup
    os.utime(work / "src" / "a.h", (1, 1))
    assert store.fetch(identity, work, NS, work / "obj" / "again.o", print) == key


def test_two_versions_of_a_header_are_both_kept(store_setup):
    store, identity, first, work, _ = store_setup
    (work / "src" / "a.h").write_text("#define A 2\n")
    (work / "obj" / "a.cu.o").write_bytes(b"\x7fELF object two")
    second = store.put(identity, "a.cu", work, work / "obj" / "a.cu.o",
                       work / "obj" / "a.cu.d", work / "src", NS, False)
    assert second != first
    assert store.fetch(identity, work, NS, work / "obj" / "x.o", print) == second
    (work / "src" / "a.h").write_text("#define A 1\n")
    assert store.fetch(identity, work, NS, work / "obj" / "x.o", print) == first


@pytest.mark.parametrize("damage", ["bytes", "swapped", "record"])
def test_a_damaged_or_wrong_entry_is_never_used_and_is_removed(store_setup, tmp_path, damage):
    store, identity, key, work, _ = store_setup
    obj = store.root / "objects" / key[:2] / f"{key}.o"
    record = obj.with_suffix(".json")
    if damage == "bytes":
        obj.write_bytes(b"\x7fELF object onf")
    elif damage == "swapped":  # a whole, valid entry of another unit under this key
        other_work = tmp_path / "other"
        other_obj, other_dep = compiled(other_work, "b.cu", b"\x7fELF b", {})
        other_identity = unit_identity(["nvcc", "b.cu"], "nvcc 13", NS)
        other = store.put(other_identity, "b.cu", other_work, other_obj, other_dep,
                          other_work / "src", NS, False)
        other_obj_path = store.root / "objects" / other[:2] / f"{other}.o"
        obj.write_bytes(other_obj_path.read_bytes())
        record.write_bytes(other_obj_path.with_suffix(".json").read_bytes())
    else:
        record.write_text("{not json")
    notes: list[str] = []
    target = work / "obj" / "fetched.o"
    assert store.fetch(identity, work, NS, target, notes.append) is None
    assert not target.exists() and not obj.exists() and not record.exists()
    assert len(notes) == 1 and "was damaged" in notes[0] and key[:12] in notes[0]


def test_objects_travel_to_another_cache_and_bad_ones_are_refused(store_setup, tmp_path):
    store, identity, key, work, _ = store_setup
    cache = ObjectCache(store.root)
    cache.part().mark_used(store.used)
    artifact = tmp_path / "artifact"
    assert cache.export(artifact) == 1
    receiving = ObjectCache(tmp_path / "linker")
    assert receiving.merge(artifact) == (1, 0)
    assert receiving.part().fetch(identity, work, NS, work / "obj" / "got.o", print) == key
    # a tampered artifact: the object no longer matches its record
    (artifact / "objects" / key[:2] / f"{key}.o").write_bytes(b"evil")
    assert ObjectCache(tmp_path / "third").merge(artifact) == (0, 1)


def crafted(artifact: Path, key: str, how: str) -> None:
    """An exported entry made hostile."""
    obj = artifact / "objects" / key[:2] / f"{key}.o"
    record = obj.with_suffix(".json")
    data = json.loads(record.read_text())
    if how == "a FIFO record":
        record.unlink()
        os.mkfifo(record)
    elif how == "a deep record":
        record.write_text("[" * 200_000 + "]" * 200_000)
    elif how == "a huge record":
        with open(record, "w") as handle:
            handle.truncate(64 << 20)
    elif how == "a FIFO object":
        obj.unlink()
        os.mkfifo(obj)
    elif how == "a 3 GiB sparse object, its record re-hashed":
        with open(obj, "r+b") as handle:
            handle.truncate(3 << 30)
        record.write_text(json.dumps({**data, "size": 3 << 30}))
    elif how == "an object bigger than its record says":
        obj.write_bytes(obj.read_bytes() + b"\0")
    elif how == "a linked object":
        obj.unlink()
        obj.symlink_to("/etc/passwd")
    elif how == "a record without a size":
        record.write_text(json.dumps({key: value for key, value in data.items()
                                      if key != "size"}))


@pytest.mark.parametrize("how", [
    "a FIFO record", "a deep record", "a huge record", "a FIFO object",
    "a 3 GiB sparse object, its record re-hashed", "an object bigger than its record says",
    "a linked object", "a record without a size"])
def test_a_crafted_import_is_refused_at_once(store_setup, tmp_path, how):
    store, _, key, _, _ = store_setup
    cache = ObjectCache(store.root)
    cache.part().mark_used(store.used)
    artifact = tmp_path / "artifact"
    assert cache.export(artifact) == 1
    crafted(artifact, key, how)
    started = time.monotonic()
    receiving = ObjectCache(tmp_path / "receiving")
    assert receiving.merge(artifact) == (0, 1)
    assert time.monotonic() - started < 10  # no read of a FIFO, no hashing of gigabytes
    assert not list((tmp_path / "receiving" / "objects").glob("*/*"))


def test_the_cache_keeps_to_its_size_dropping_the_least_recently_used(tmp_path):
    store = ObjectStore(tmp_path / "objects")
    keys = []
    for number in range(5):
        work = tmp_path / f"w{number}"
        obj, dep = compiled(work, "a.cu", bytes([number]) * 1000, {})
        identity = unit_identity(["cc", str(number)], "x", NS)
        keys.append(store.put(identity, "a.cu", work, obj, dep, work / "src", NS, False))
        record = store.root / "objects" / keys[-1][:2] / f"{keys[-1]}.json"
        os.utime(record, (1000 + number, 1000 + number))
    os.utime(store.root / "objects" / keys[0][:2] / f"{keys[0]}.json", (2000, 2000))  # used
    removed, kept = evict(store.root, 3500)
    left = {path.stem for path in (store.root / "objects").glob("*/*.o")}
    assert removed == 3 and kept == 2000
    assert left == {keys[0], keys[4]}  # the most recently used two


def test_threads_sharing_a_store_all_succeed(tmp_path):
    """Eight builds of the same unit at once: each keeps and finds the same entry."""
    store = ObjectStore(tmp_path / "objects")
    work = tmp_path / "cell"
    obj, dep = compiled(work, "a.cu", b"same object", {"a.h": "same\n"})
    identity = unit_identity(["nvcc", f"{work}/src/a.cu"], "x", NS)
    errors = []

    def one(number: int) -> None:
        try:
            store.put(identity, "a.cu", work, obj, dep, work / "src", NS, False)
            target = work / "obj" / f"b{number}.o"
            assert store.fetch(identity, work, NS, target, print)
            assert target.read_bytes() == b"same object"
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(list((store.root / "objects").glob("*/*.o"))) == 1
    assert not list(store.root.rglob("*.tmp"))


# -- the budget ----------------------------------------------------------------------------------

def test_a_compiler_waits_until_its_memory_is_free():
    pool = CompilePool(Budget(2, 7 * GiB))
    pool.queue(2)
    first = pool.admit(1, lambda threads: 4 * GiB * threads)
    admitted = threading.Event()

    def second() -> None:
        pool.release(pool.admit(1, lambda threads: 4 * GiB * threads))
        admitted.set()

    thread = threading.Thread(target=second)
    thread.start()
    assert not admitted.wait(0.3)  # two 4 GiB compilers do not fit in 7 GiB
    pool.release(first)
    assert admitted.wait(5)
    thread.join()


def test_of_the_compilers_waiting_the_longest_starts_first_whichever_cell_it_is_of():
    # two cells' workers wait on one budget: arrival order would start a cell's 600-s unit
    # after the other cell's short ones, and the build would end on it alone
    pool, first = _one_core_taken()
    started: list[float] = []

    def unit(estimate: float) -> None:
        grant = pool.admit(1, lambda threads: GiB, estimate)
        started.append(estimate)
        pool.release(grant)

    threads = _in_line(pool, unit, [30.0, 600.0, 30.0, 120.0])
    pool.release(first)
    for thread in threads:
        thread.join(5)
    assert started == [600.0, 120.0, 30.0, 30.0] and pool.in_line == 0


def _one_core_taken() -> tuple[CompilePool, Grant]:
    """A pool of one core, taken: compilers asking now wait in line."""
    pool = CompilePool(Budget(1, 100 * GiB))
    pool.queue(8)
    return pool, pool.admit(1, lambda threads: GiB)


def _in_line(pool: CompilePool, unit: Callable[[float], None],
             estimates: list[float]) -> list[threading.Thread]:
    """A thread running `unit` for each estimate, each waiting in the pool before the next."""
    threads = []
    for estimate in estimates:
        threads.append(threading.Thread(target=unit, args=(estimate,)))
        threads[-1].start()
        while pool.in_line < len(threads):
            time.sleep(0.01)
    return threads


def test_a_compiler_stopped_while_waiting_leaves_the_line():
    pool, first = _one_core_taken()
    outcome: list[str] = []

    def unit(estimate: float) -> None:
        try:
            pool.release(pool.admit(1, lambda threads: GiB, estimate))
            outcome.append("ran")
        except Stopped:
            outcome.append("stopped")

    (waiting,) = _in_line(pool, unit, [600.0])
    pool.stop()
    waiting.join(5)
    assert outcome == ["stopped"] and pool.in_line == 0
    pool.release(first)


def test_the_last_units_share_the_free_cores_as_threads():
    pool = CompilePool(Budget(16, 200 * GiB))
    pool.queue(3)
    grants = [pool.admit(9, lambda threads: GiB * threads) for _ in range(3)]
    assert [grant.threads for grant in grants] == [5, 5, 6]  # every core busy
    many = CompilePool(Budget(16, 200 * GiB))
    many.queue(58)
    assert many.admit(9, lambda threads: GiB * threads).threads == 1


def test_threads_shrink_to_fit_the_memory_and_one_compiler_always_runs():
    pool = CompilePool(Budget(8, 10 * GiB))
    pool.queue(1)
    assert pool.admit(8, lambda threads: 4 * GiB * threads).threads == 2
    alone = CompilePool(Budget(2, 1 * GiB))
    alone.queue(1)
    assert alone.admit(1, lambda threads: 4 * GiB).threads == 1  # over budget, but alone


def test_nothing_starts_after_the_time_limit(tmp_path):
    pool = CompilePool(Budget(2, GiB), deadline=time.monotonic() - 1)
    with pytest.raises(TimeLimitReached):
        pool.admit(1, lambda threads: 1)
    with pytest.raises(TimeLimitReached) as refused:
        pool.run([sys.executable, "-c", "pass"], None, _log(tmp_path)[0], "nothing")
    assert refused.value.ran is None  # nothing ran: nothing learnt of the unit


def test_a_unit_starts_only_when_its_estimate_ends_before_the_time_limit():
    pool = CompilePool(Budget(2, GiB), deadline=time.monotonic() + 30)
    assert pool.fits(5) and not pool.fits(60)
    assert CompilePool(Budget(2, GiB)).fits(10**9)  # no limit
    assert grace_for(None) == 0 and grace_for(3600) == 360 and grace_for(10 * 3600) == 1200


def test_a_compiler_running_at_the_time_limit_may_finish_within_the_grace(tmp_path):
    log, _ = _log(tmp_path)
    pool = CompilePool(Budget(1, GiB), deadline=time.monotonic() + 0.3, grace=5)
    done = pool.run([sys.executable, "-c", "import time; time.sleep(1.5)"], tmp_path, log,
                    "sleeping")
    assert done.seconds >= 1.5  # ended by itself, 1.2 s past the limit
    late = CompilePool(Budget(1, GiB), deadline=time.monotonic() + 0.3, grace=0.5)
    started = time.monotonic()
    with pytest.raises(TimeLimitReached) as stopped:
        late.run([sys.executable, "-c", "import time; time.sleep(30)"], tmp_path, log,
                 "sleeping")
    assert time.monotonic() - started < 10
    assert stopped.value.ran is not None and 0.7 <= stopped.value.ran < 10  # limit + grace


def test_the_budget_follows_the_machine_unless_told():
    budget = machine_budget()
    assert 1 <= budget.cores <= os.cpu_count() and budget.memory > 0
    assert machine_budget(jobs=3, memory=5 * GiB) == Budget(3, 5 * GiB)
    assert Budget(16, 64 * GiB).share(4) == Budget(4, 16 * GiB)


def _log(tmp_path: Path) -> tuple[Log, Path]:
    path = tmp_path / "log"
    return Log(open(path, "w")), path


def test_a_compiler_is_measured(tmp_path):
    log, _ = _log(tmp_path)
    pool = CompilePool(Budget(1, GiB))
    done = pool.run([sys.executable, "-c", "x = bytearray(300 * 2**20)"], tmp_path, log,
                    "allocating")
    assert done.peak is not None and done.peak > 300 * 2**20
    with pytest.raises(BuildError, match=r"failing failed \(exit 3\): boom"):
        pool.run([sys.executable, "-c", "print('boom'); raise SystemExit(3)"], tmp_path, log,
                 "failing")


@pytest.mark.parametrize("how", ["stop", "time limit"])
def test_a_stopped_compiler_and_its_children_end_at_once(tmp_path, how):
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


def test_shards_cover_every_unit_once_the_same_way_every_time(tmp_path):
    (cell,) = plan_for(tmp_path, MANY_UNITS).cells
    shards = shard_of(cell, 3)
    compiled_units = {unit.source for unit in cell.units if unit.compiled}
    assert len(compiled_units) == 9 and "csrc/parts.h" not in compiled_units
    assert set().union(*shards) == compiled_units
    assert sum(len(shard) for shard in shards) == 9 and all(len(s) == 3 for s in shards)
    assert shard_of(cell, 3) == shards
    assert shard_count(cell_seconds(cell), 60, 4, 9) == 3
    assert shard_count(cell_seconds(cell), 10**6, 4, 9) == 1
    assert shard_count(10**9, 1, 1, 9) == 9  # never more shards than units


def test_an_unmeasured_unit_costs_what_the_measured_units_most_like_it_cost(tmp_path):
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


def test_a_unit_starts_before_a_time_limit_only_if_the_slowest_like_it_would_end(tmp_path):
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
        tmp_path):
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


def test_a_unit_stopped_at_a_time_limit_is_known_to_take_longer(tmp_path):
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


def test_costs_measured_earlier_decide_the_estimates(tmp_path):
    (cell,) = plan_for(tmp_path, MANY_UNITS).cells
    unit = next(u for u in cell.units if u.source == "csrc/part3.cu")
    assert unit_memory(cell, unit, 2) == 8 * GiB  # the default: 4 GiB per nvcc thread
    book = CostBook(tmp_path / "costs")
    book.record("many-units", {cost_key(cell, unit): UnitCost(12.0, GiB // 2, 1)})
    costs = book.read("many-units")
    assert unit_memory(cell, unit, 2, costs) == GiB
    assert cell_seconds(cell, costs) < cell_seconds(cell) and \
        json.loads((tmp_path / "costs" / "many-units.json").read_text())[cost_key(cell, unit)][
            "seconds"] == 12.0


def test_a_cost_book_travels_out_with_exported_objects_and_in_with_imported_ones(tmp_path):
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


def test_a_matrixs_cost_book_is_read_below_the_machines_and_cuts_the_shards(tmp_path):
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


def test_a_share_of_cached_units_and_at_least_one_imported_are_compiled_again():
    from factory.cells.kernel_builder import _to_check

    local = {f"csrc/part{n}.cu": False for n in range(8)}
    assert _to_check(local, 0.0) == set()
    assert _to_check(local, 1.0) == set(local)
    assert len(_to_check(local, 0.3)) == 3
    mixed = {**local, "csrc/imported.cu": True}
    assert _to_check(mixed, 0.0) == {"csrc/imported.cu"}  # the one imported, always
    many = {f"csrc/imported{n}.cu": True for n in range(60)}
    chosen = _to_check(many, 0.0)
    assert len(chosen) == 3 and chosen <= set(many)  # 5% of 60
