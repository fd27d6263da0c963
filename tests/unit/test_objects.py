"""The object cache, the compile budget and unit costs, without a compiler: objects are keyed by
the files they were made from, checked before use, bounded, handed between machines; compilers
are admitted as cores and memory allow, measured, and stopped; shards are cut the same way on
every machine."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from factory.compile.objects import (
    ObjectCache,
    ObjectStore,
    evict,
    merge_all,
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
from factory.errors import ConfigError
from factory.pipeline.options import object_key
from factory.trust.keys import OBJECT_KEY_VARIABLE, KeyFile, object_cache_key

from ..support.checks import present
from ..support.factory import write
from ..support.objects import NS, GiB
from ..support.objects import file_log as _log

KEY = bytes(range(32))  # the object cache's key of these tests' builds


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
def store_setup(tmp_path: Path) -> tuple[Any, str, str, Path, Path]:
    outside = tmp_path / "toolkit" / "cuda_runtime.h"
    work = tmp_path / "build" / "cell.1"
    obj, depfile = compiled(work, "a.cu", b"\x7fELF object one", {"a.h": "#define A 1\n",
                                                                  str(outside): "// toolkit\n"})
    store = ObjectStore(tmp_path / "objects", KEY)
    identity = unit_identity(["nvcc", "-c", f"{work}/src/a.cu", "-o", str(obj)], "nvcc 13",
                             NS)
    key = store.put(identity, "a.cu", work, obj, depfile, work / "src", NS, False)
    return store, identity, key, work, outside


def test_the_namespace_does_not_change_the_identity_but_the_command_does(tmp_path: Path) -> None:
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


def test_a_depfile_is_read_as_make_reads_it(tmp_path: Path) -> None:
    depfile = write(tmp_path / "a.d", "/w/obj/a.o : /w/src/a.cu \\\n  /w/src/my\\ header.h "
                                      "rel.h \\\n /usr/include/stdio.h\n")
    assert read_depfile(depfile, Path("/w/src")) == [
        Path("/w/src/a.cu"), Path("/w/src/my header.h"), Path("/w/src/rel.h"),
        Path("/usr/include/stdio.h")]


def test_a_unit_is_found_again_by_the_next_build_of_its_cell(
        store_setup: tuple[Any, str, str, Path, Path]) -> None:
    store, identity, key, work, _ = store_setup
    shutil.rmtree(work / "obj")  # the next build starts from a fresh copy of the source
    shutil.rmtree(work / "src")
    compiled(work, "a.cu", b"", {"a.h": "#define A 1\n"})
    target = work / "obj" / "a.cu.o"
    assert store.fetch(identity, work, NS, target, print) == key
    assert target.read_bytes() == b"\x7fELF object one"
    assert store.used == {key: identity}


@pytest.mark.parametrize("changed", ["header", "outside", "source", "gone"])
def test_any_file_the_compiler_read_changing_is_a_miss(
        store_setup: tuple[Any, str, str, Path, Path], changed: str) -> None:
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


def test_a_touched_file_with_the_same_bytes_is_still_a_hit(
        store_setup: tuple[Any, str, str, Path, Path]) -> None:
    store, identity, key, work, _ = store_setup
    os.utime(work / "src" / "a.h", (1, 1))
    assert store.fetch(identity, work, NS, work / "obj" / "again.o", print) == key


def test_two_versions_of_a_header_are_both_kept(
        store_setup: tuple[Any, str, str, Path, Path]) -> None:
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
def test_a_damaged_or_wrong_entry_is_never_used_and_is_removed(
        store_setup: tuple[Any, str, str, Path, Path], tmp_path: Path, damage: str) -> None:
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


def test_objects_travel_to_another_cache_and_bad_ones_are_refused(
        store_setup: tuple[Any, str, str, Path, Path], tmp_path: Path) -> None:
    store, identity, key, work, _ = store_setup
    cache = ObjectCache(store.root, key=KEY)
    cache.part().mark_used(store.used)
    artifact = tmp_path / "artifact"
    assert cache.export(artifact) == 1
    receiving = ObjectCache(tmp_path / "linker", key=KEY)
    assert receiving.merge(artifact) == (1, 0)
    assert receiving.part().fetch(identity, work, NS, work / "obj" / "got.o", print) == key
    # a tampered artifact: the object no longer matches its record
    (artifact / "objects" / key[:2] / f"{key}.o").write_bytes(b"evil")
    assert ObjectCache(tmp_path / "third", key=KEY).merge(artifact) == (0, 1)


def test_an_entry_not_written_under_the_key_is_compiled_again(
        store_setup: tuple[Any, str, str, Path, Path]) -> None:
    """A poisoned entry: its object replaced and its record re-hashed to match, as anyone who
    can write the cache folder could, but without the key."""
    store, identity, key, work, _ = store_setup
    obj = store.root / "objects" / key[:2] / f"{key}.o"
    record = obj.with_suffix(".json")
    obj.write_bytes(b"\x7fELF poisoned")
    data = json.loads(record.read_text())
    record.write_text(json.dumps({**data, "sha256": hashlib.sha256(obj.read_bytes()).hexdigest(),
                                  "size": obj.stat().st_size}))
    notes: list[str] = []
    target = work / "obj" / "fetched.o"
    assert store.fetch(identity, work, NS, target, notes.append) is None
    assert not target.exists() and not obj.exists() and not record.exists()
    assert notes == [f"object cache: the entry {key[:12]} was not written under this cache's "
                     "key (an entry made by another user, machine or key); removed, the unit "
                     "is compiled again"]


def test_another_keys_entries_are_compiled_again_and_not_imported(
        store_setup: tuple[Any, str, str, Path, Path], tmp_path: Path) -> None:
    store, identity, _, work, _ = store_setup
    other = ObjectStore(store.root, bytes(32))
    notes: list[str] = []
    assert other.fetch(identity, work, NS, work / "obj" / "got.o", notes.append) is None
    assert "was not written under this cache's key" in notes[0]
    again = ObjectStore(tmp_path / "again", KEY)
    again.put(identity, "a.cu", work, work / "obj" / "a.cu.o", work / "obj" / "a.cu.d",
              work / "src", NS, False)
    cache = ObjectCache(again.root, key=KEY)
    cache.part().mark_used(again.used)
    assert cache.export(tmp_path / "artifact") == 1
    assert ObjectCache(tmp_path / "elsewhere", key=bytes(32)).merge(tmp_path / "artifact") \
        == (0, 1)
    assert ObjectCache(tmp_path / "same", key=KEY).merge(tmp_path / "artifact") == (1, 0)


def test_a_manifest_entry_pointing_at_another_object_is_passed_over(
        store_setup: tuple[Any, str, str, Path, Path], tmp_path: Path) -> None:
    """Two builds of one command from different sources; the manifest's newest entry is then
    made to name the older object for the newer sources: the lookup does not take it."""
    store, identity, key, work, _ = store_setup
    write(work / "src" / "a.h", "#define A 2\n")
    obj, depfile = work / "obj" / "a.cu.o", work / "obj" / "a.cu.d"
    obj.write_bytes(b"\x7fELF object two")
    newer = store.put(identity, "a.cu", work, obj, depfile, work / "src", NS, False)
    manifest = store.root / "manifests" / identity[:2] / f"{identity}.json"
    data = json.loads(manifest.read_text())
    assert data["entries"][0]["object"] == newer
    data["entries"][0]["object"] = key
    manifest.write_text(json.dumps(data))
    assert store.fetch(identity, work, NS, work / "obj" / "got.o", print) is None


def test_the_key_comes_from_the_variable_or_a_private_file(tmp_path: Path) -> None:
    config = {"XDG_CONFIG_HOME": str(tmp_path / "config")}
    made = object_cache_key(object_key(config))
    path = tmp_path / "config" / "kernel-wheel-factory" / "object-cache.key"
    assert object_key(config) == KeyFile(path)
    assert len(made) == 32 and path.stat().st_mode & 0o777 == 0o600
    assert object_cache_key(object_key(config)) == made
    given = object_key({**config, OBJECT_KEY_VARIABLE: "a CI secret of some length"})
    assert "a CI secret" not in repr(given)  # never printed
    assert object_cache_key(given) not in (made, b"a CI secret of some length")
    assert object_cache_key(given) == object_cache_key(given)
    with pytest.raises(ConfigError, match="needs at least 16"):
        object_cache_key(object_key({OBJECT_KEY_VARIABLE: "short"}))


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
def test_a_crafted_import_is_refused_at_once(store_setup: tuple[Any, str, str, Path, Path],
                                             tmp_path: Path, how: str) -> None:
    store, _, key, _, _ = store_setup
    cache = ObjectCache(store.root, key=KEY)
    cache.part().mark_used(store.used)
    artifact = tmp_path / "artifact"
    assert cache.export(artifact) == 1
    crafted(artifact, key, how)
    started = time.monotonic()
    receiving = ObjectCache(tmp_path / "receiving", key=KEY)
    assert receiving.merge(artifact) == (0, 1)
    assert time.monotonic() - started < 10  # no read of a FIFO, no hashing of gigabytes
    assert not list((tmp_path / "receiving" / "objects").glob("*/*"))


def test_the_cache_keeps_to_its_size_dropping_the_least_recently_used(tmp_path: Path) -> None:
    store = ObjectStore(tmp_path / "objects", KEY)
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


def test_threads_sharing_a_store_all_succeed(tmp_path: Path) -> None:
    """Eight builds of the same unit at once: each keeps and finds the same entry."""
    store = ObjectStore(tmp_path / "objects", KEY)
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

def test_a_compiler_waits_until_its_memory_is_free() -> None:
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


def test_of_the_compilers_waiting_the_longest_starts_first_whichever_cell_it_is_of() -> None:
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


def test_a_compiler_stopped_while_waiting_leaves_the_line() -> None:
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


def test_the_last_units_share_the_free_cores_as_threads() -> None:
    pool = CompilePool(Budget(16, 200 * GiB))
    pool.queue(3)
    grants = [pool.admit(9, lambda threads: GiB * threads) for _ in range(3)]
    assert [grant.threads for grant in grants] == [5, 5, 6]  # every core busy
    many = CompilePool(Budget(16, 200 * GiB))
    many.queue(58)
    assert many.admit(9, lambda threads: GiB * threads).threads == 1


def test_threads_shrink_to_fit_the_memory_and_one_compiler_always_runs() -> None:
    pool = CompilePool(Budget(8, 10 * GiB))
    pool.queue(1)
    assert pool.admit(8, lambda threads: 4 * GiB * threads).threads == 2
    alone = CompilePool(Budget(2, 1 * GiB))
    alone.queue(1)
    assert alone.admit(1, lambda threads: 4 * GiB).threads == 1  # over budget, but alone


def test_nothing_starts_after_the_time_limit(tmp_path: Path) -> None:
    pool = CompilePool(Budget(2, GiB), deadline=time.monotonic() - 1)
    with pytest.raises(TimeLimitReached):
        pool.admit(1, lambda threads: 1)
    with pytest.raises(TimeLimitReached) as refused:
        pool.run([sys.executable, "-c", "pass"], None, _log(tmp_path)[0], "nothing")
    assert refused.value.ran is None  # nothing ran: nothing learnt of the unit


def test_a_unit_starts_only_when_its_estimate_ends_before_the_time_limit() -> None:
    pool = CompilePool(Budget(2, GiB), deadline=time.monotonic() + 30)
    assert pool.fits(5) and not pool.fits(60)
    assert CompilePool(Budget(2, GiB)).fits(10**9)  # no limit
    assert grace_for(None) == 0 and grace_for(3600) == 360 and grace_for(10 * 3600) == 1200


def test_the_budget_follows_the_machine_unless_told() -> None:
    budget = machine_budget()
    assert 1 <= budget.cores <= present(os.cpu_count()) and budget.memory > 0
    assert machine_budget(jobs=3, memory=5 * GiB) == Budget(3, 5 * GiB)
    assert Budget(16, 64 * GiB).share(4) == Budget(4, 16 * GiB)




def test_a_share_of_cached_units_and_at_least_one_imported_are_compiled_again() -> None:
    from factory.cells.kinds.kernel_builder.build import _to_check

    local = {f"csrc/part{n}.cu": False for n in range(8)}
    assert _to_check(local, 0.0) == set()
    assert _to_check(local, 1.0) == set(local)
    assert len(_to_check(local, 0.3)) == 3
    mixed = {**local, "csrc/imported.cu": True}
    assert _to_check(mixed, 0.0) == {"csrc/imported.cu"}  # the one imported, always
    many = {f"csrc/imported{n}.cu": True for n in range(60)}
    chosen = _to_check(many, 0.0)
    assert len(chosen) == 3 and chosen <= set(many)  # 5% of 60


def test_a_run_that_used_no_object_still_exports_a_cache_the_link_takes_in(
        tmp_path: Path) -> None:
    """A shard of a setup.py project's cell may get no unit: its export is an empty object
    cache, which the job that links takes in like any other."""
    assert ObjectCache(tmp_path / "cache", KEY).export(tmp_path / "empty") == 0
    assert (tmp_path / "empty" / "objects").is_dir()
    assert merge_all(tmp_path / "empty", tmp_path / "link", KEY) == (0, 0)
