"""A PEP 517 build's compiles served by the object cache, through the compiler wrapper as a
build runs it (a shell script the build calls as its compiler) and the factory's broker, with
the real gcc behind it: an unchanged unit is not compiled again, a touched header recompiles
its unit, a tampered entry is refused, another project never sees a project's objects, a
command the cache cannot key and a broker that is gone cost only the caching; and the remote
object store shared by machines (Debian's redis-server, moto's S3 server): a unit one machine
compiled is served to another, a poisoned or foreign object is refused, a store that is down
or hangs costs one warning."""

from __future__ import annotations

import json
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from factory.cells.broker import ObjectBroker, Timing, shard_of_unit
from factory.cells.compilers import install_wrapper
from factory.compile.held import cell_holdings, held_units
from factory.compile.objects import ObjectStore, unit_identity
from factory.compile.pool import Budget, CompilePool
from factory.compile.remote import READ_TIMEOUT, remote_store
from factory.plan.costs import UnitCost
from factory.system.process import Log

from ..support.stores import free_port, redis_server, s3_server

KEY = b"the object cache key of these tests"
UNIT = '#include "unit.h"\nint scaled(int x) { return x * FACTOR; }\n'


@dataclass
class Served:
    work: Path
    src: Path
    store: ObjectStore
    broker: ObjectBroker
    log: Path
    count: Path  # one line per time the real compiler ran

    def compiler(self, broker: str | None = None, shard: bool = False) -> str:
        """The wrapper, as a build sees it: CC."""
        real = self.work / "real-gcc"
        if not real.exists():
            real.write_text(f'#!/bin/sh\necho ran >> {self.count}\nexec {shutil.which("gcc")} '
                            '"$@"\n')
            real.chmod(0o755)
        folder = self.work / "compilers"
        folder.mkdir(exist_ok=True)
        return install_wrapper(folder, folder / "gcc", Path(sys.executable), {
            "real": str(real), "nvcc": False, "rules": [], "record": str(folder / "changes"),
            "targets": [], "broker": broker or self.broker.address, "work": str(self.work),
            "shard": shard})

    def compile(self, *args: str, broker: str | None = None,
                shard: bool = False) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([self.compiler(broker, shard), *args], cwd=self.src,
                              capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
        return done

    def ran(self) -> int:
        return len(self.count.read_text().splitlines()) if self.count.exists() else 0

    def logged(self) -> str:
        return self.log.read_text()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    work = tmp_path / "build"
    src = work / "src"
    src.mkdir(parents=True)
    (src / "unit.c").write_text(UNIT)
    (src / "unit.h").write_text("#define FACTOR 3\n")
    store = ObjectStore(tmp_path / "objects", KEY)
    with open(tmp_path / "log", "w") as handle, \
            ObjectBroker(store, "gcc of these tests\nproject one", Log(handle)) as broker:
        handle.reconfigure(line_buffering=True)
        yield Served(work, src, store, broker, tmp_path / "log", tmp_path / "count")


def test_an_unchanged_unit_comes_from_the_cache_and_a_touched_header_recompiles_it(
        served: Served) -> None:
    served.compile("-O2", "-c", "unit.c", "-o", "unit.o")
    first = (served.src / "unit.o").read_bytes()
    assert served.ran() == 1 and served.broker.tally.compiled == 1
    assert "unit.c: compiled in" in served.logged()
    assert not (served.src / "unit.o.factory.d").exists()  # its own dependency file, removed

    (served.src / "unit.o").unlink()
    served.compile("-O2", "-c", "unit.c", "-o", "unit.o")
    assert served.ran() == 1  # the compiler did not run
    assert (served.src / "unit.o").read_bytes() == first
    assert served.broker.tally.cached == 1
    assert "$WORK/src/unit.c: from the object cache" in served.logged()

    (served.src / "unit.h").write_text("#define FACTOR 5\n")
    served.compile("-O2", "-c", "unit.c", "-o", "unit.o")
    assert served.ran() == 2 and (served.src / "unit.o").read_bytes() != first

    (served.src / "unit.h").write_text("#define FACTOR 3\n")  # back: the first input set
    served.compile("-O2", "-c", "unit.c", "-o", "unit.o")
    assert served.ran() == 2 and (served.src / "unit.o").read_bytes() == first

    served.compile("-O3", "-c", "unit.c", "-o", "unit.o")  # another command: another identity
    assert served.ran() == 3
    assert (served.broker.tally.cached, served.broker.tally.compiled) == (2, 3)


def test_a_cached_unit_leaves_the_dependency_file_the_build_asked_for(served: Served) -> None:
    """ninja (torch's cpp_extension) reads each compile's -MMD file; a hit writes it too, with
    every file the object was made from (-MMD is run as -MD, so system headers count)."""
    (served.src / "unit.c").write_text("#include <stdio.h>\n" + UNIT)
    served.compile("-MMD", "-MF", "unit.o.d", "-c", "unit.c", "-o", "unit.o")
    compiled = (served.src / "unit.o.d").read_text()
    assert "/usr/include/stdio.h" in compiled
    (served.src / "unit.o.d").unlink()
    served.compile("-MMD", "-MF", "unit.o.d", "-c", "unit.c", "-o", "unit.o")
    assert served.ran() == 1
    written = (served.src / "unit.o.d").read_text()
    assert written.startswith("unit.o:")
    listed = written.split(":", 1)[1].replace("\\\n", " ").split()
    assert {str(served.src / "unit.c"), str(served.src / "unit.h"),
            "/usr/include/stdio.h"} <= set(listed)


def test_a_tampered_entry_is_refused_and_the_unit_compiled_again(served: Served) -> None:
    served.compile("-c", "unit.c", "-o", "unit.o")
    (obj,) = (served.store.root / "objects").glob("*/*.o")
    obj.write_bytes(obj.read_bytes()[:-8] + b"tampered")
    served.compile("-c", "unit.c", "-o", "unit.o")
    assert served.ran() == 2
    assert "was damaged (sha256" in served.logged()
    assert b"tampered" not in (served.src / "unit.o").read_bytes()

    (record,) = (served.store.root / "objects").glob("*/*.json")  # the unit kept again
    data = json.loads(record.read_text())
    obj = record.with_suffix(".o")
    obj.write_bytes(obj.read_bytes() + b"x")
    record.write_text(json.dumps({**data, "size": data["size"] + 1, "sha256": "0" * 64}))
    served.compile("-c", "unit.c", "-o", "unit.o")
    assert served.ran() == 3
    assert "was not written under this cache's key" in served.logged()


def test_another_project_never_sees_a_projects_objects(served: Served, tmp_path: Path) -> None:
    served.compile("-c", "unit.c", "-o", "unit.o")
    with open(tmp_path / "other.log", "w") as handle, \
            ObjectBroker(served.store, "gcc of these tests\nproject two", Log(handle)) as other:
        served.compile("-c", "unit.c", "-o", "unit.o", broker=other.address)
        assert (other.tally.cached, other.tally.compiled) == (0, 1)
    assert served.ran() == 2


def test_a_command_the_cache_cannot_key_is_compiled_and_named(served: Served) -> None:
    (served.src / "flags").write_text("-O2\n")
    for _ in range(2):
        done = served.compile("@flags", "-c", "unit.c", "-o", "unit.o")
        assert "did not answer" not in done.stderr
    assert served.ran() == 2 and (served.src / "unit.o").is_file()
    assert served.logged().count(
        "$WORK/src/unit.c: compiled without the object cache: it reads a response file") == 2
    served.compile("-shared", "-fPIC", "unit.c", "-o", "unit.so")  # not a unit, not said
    assert served.ran() == 3 and served.logged().count("without the object cache") == 2


def test_a_broker_that_is_gone_costs_the_caching_and_one_line(served: Served) -> None:
    done = served.compile("-c", "unit.c", "-o", "unit.o",
                          broker=str(served.work / "no-broker.sock"))
    assert served.ran() == 1 and (served.src / "unit.o").is_file()
    assert done.stderr.count("kernel-wheel-factory: the object cache did not answer") == 1


def ask(address: str, header: dict[str, object], payload: bytes = b"") -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(10)
        connection.connect(address)
        data = json.dumps(header).encode()
        connection.sendall(struct.pack(">I", len(data)) + data + payload)
        try:
            connection.shutdown(socket.SHUT_WR)
            return connection.recv(1 << 16)
        except ConnectionResetError:  # closed with the rest unread
            return b""


def test_the_broker_keeps_nothing_a_wrapper_states_badly(served: Served) -> None:
    """A build's own code can speak to the socket: a malformed object (a digest that is not
    one, a size over what it sends, junk) is dropped, and the broker answers the next."""
    request = {"argv": ["gcc", "-c", "unit.c", "-o", "unit.o"], "cwd": str(served.src),
               "env": {}, "source": "unit.c"}
    assert ask(served.broker.address, {"op": "store", "inputs": [["/etc/passwd", "not hex"]],
                                       "size": 4, "seconds": 1, **request}, b"ELF!") == b""
    assert ask(served.broker.address, {"op": "store", "inputs": [], "size": 1 << 40,
                                       "seconds": 1, **request}) == b""
    assert ask(served.broker.address, {"op": "find", **request,
                                       "env": {"HOME": "/root"}}) == b""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.connect(served.broker.address)
        connection.sendall(b"\xff\xff\xff\xffjunk")
    assert not list((served.store.root).rglob("*.o"))
    served.compile("-c", "unit.c", "-o", "unit.o")
    assert served.broker.tally.compiled == 1


def test_past_the_time_limit_a_unit_is_served_but_none_starts(served: Served,
                                                              tmp_path: Path) -> None:
    """A unit the cache holds is served whatever the time; one it does not is not started when
    the limit has passed (an empty stand-in lets the build tool go on to the units after it;
    the broker says why), and one whose measured cost ends past the limit is not started
    before it either, nor one the cell's slowest measured unit says would not end in time."""
    served.compile("-c", "unit.c", "-o", "unit.o")
    measured: dict[str, UnitCost] = {}
    expired = CompilePool(Budget(1, 2**30), deadline=time.monotonic() - 1)
    with open(tmp_path / "late.log", "w") as handle, \
            ObjectBroker(served.store, "gcc of these tests\nproject one", Log(handle),
                         Timing(expired, {}, measured.__setitem__, "cell", 1)) as late:
        served.compile("-c", "unit.c", "-o", "unit.o", broker=late.address)
        assert late.tally.cached == 1
        done = served.compile("-O1", "-c", "unit.c", "-o", "unit.o", broker=late.address)
        assert "unit.c not compiled: the build's time limit would end it" in done.stderr
        assert "did not answer" not in done.stderr  # the broker took the note
        assert (served.src / "unit.o").stat().st_size == 0  # a stand-in
        assert late.tally.late == ["$WORK/src/unit.c"] and served.ran() == 1
    soon = CompilePool(Budget(1, 2**30), deadline=time.monotonic() + 60)
    costs = {"cell/unit.c": UnitCost(600.0, None, 1)}
    with open(tmp_path / "soon.log", "w") as handle, \
            ObjectBroker(served.store, "gcc of these tests\nproject one", Log(handle),
                         Timing(soon, costs, measured.__setitem__, "cell", 1)) as broker:
        served.compile("-O2", "-c", "unit.c", "-o", "unit.o", broker=broker.address)
        (served.src / "extra.c").write_text("int extra(void) { return 7; }\n")
        served.compile("-c", "extra.c", "-o", "extra.o", broker=broker.address)  # unmeasured
        assert broker.tally.late == ["$WORK/src/unit.c", "$WORK/src/extra.c"]
        costs.clear()
        served.compile("-O2", "-c", "unit.c", "-o", "unit.o", broker=broker.address)
    assert served.ran() == 2
    assert list(measured) == ["cell/unit.c"] and measured["cell/unit.c"].seconds > 0


def test_a_shard_build_compiles_its_own_units_and_stands_in_for_the_rest(
        served: Served, tmp_path: Path) -> None:
    """--unit-shard I/N of a build whose units are known only as it runs: each source falls to
    one shard by its name; another shard's unit, and every link, leaves an empty stand-in so
    that the build goes on; a unit the cache holds is served to any shard."""
    (served.src / "extra.c").write_text("int extra(void) { return 7; }\n")
    shards = {source: shard_of_unit(f"$WORK/src/{source}", 2) for source in
              ("unit.c", "extra.c")}
    assert set(shards.values()) == {1, 2}  # the two names fall to the two shards
    for index in (1, 2):
        with open(tmp_path / f"shard{index}.log", "w") as handle, \
                ObjectBroker(served.store, "gcc of these tests\nproject one", Log(handle),
                             shard=(index, 2)) as broker:
            for source in shards:
                done = served.compile("-MMD", "-MF", f"{source}.d", "-c", source, "-o",
                                      f"{source}.o", broker=broker.address, shard=True)
                assert "did not answer" not in done.stderr
                made = shards[source] == index or index == 2  # 2 is served shard 1's
                assert ((served.src / f"{source}.o").stat().st_size > 0) == made, source
                assert (served.src / f"{source}.d").is_file()
            served.compile("-shared", "unit.c.o", "extra.c.o", "-o", "lib.so",
                           broker=broker.address, shard=True)
            assert (served.src / "lib.so").stat().st_size == 0
            assert broker.tally.foreign == (1 if index == 1 else 0)
    assert served.ran() == 2  # each unit compiled once, by its shard


# -- the remote object store, shared by machines ------------------------------------------------

PASSWORD = "s3cret-store-pass"
HOLDINGS = cell_holdings("project one", "one-cell")


@pytest.fixture(params=["redis", "s3"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path,
              monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A real store: Debian's redis-server (behind a password), or moto's S3 server."""
    if request.param == "redis":
        with redis_server(tmp_path / "redis", PASSWORD) as url:
            yield url
    else:
        with s3_server(monkeypatch):
            yield "s3://kernel-wheels/objects"


@contextmanager
def machine(served: Served, tmp_path: Path, name: str, url: str, key: bytes = KEY,
            timeout: float = READ_TIMEOUT) -> Iterator[tuple[ObjectBroker, list[str], Path]]:
    """Another machine's build of the same project: an object cache of its own, the remote
    store behind it; its broker, the warnings it gave and its log."""
    warnings: list[str] = []
    store = ObjectStore(tmp_path / f"{name}-objects", key,
                        remote_store(url, "--object-store", warnings.append, timeout))
    log = tmp_path / f"{name}.log"
    with open(log, "w") as handle, \
            ObjectBroker(store, "gcc of these tests\nproject one", Log(handle),
                         holdings=HOLDINGS) as broker:
        handle.reconfigure(line_buffering=True)
        yield broker, warnings, log


def test_a_unit_one_machine_compiled_is_served_to_another_by_the_store(
        served: Served, tmp_path: Path, store_url: str) -> None:
    with machine(served, tmp_path, "one", store_url) as (broker, warnings, _):
        served.compile("-c", "unit.c", "-o", "unit.o", broker=broker.address)
        remote = broker.store.remote
        assert remote is not None and remote.given == 1
        # what a plan reads: the unit is held while the project's files are unchanged
        assert held_units(KEY, HOLDINGS, remote.holdings(HOLDINGS), served.src, "") == \
            {"unit.c"}
        header = served.src / "unit.h"
        header.write_text(header.read_text() + "// changed\n")
        assert held_units(KEY, HOLDINGS, remote.holdings(HOLDINGS), served.src, "") == set()
        header.write_text(header.read_text().removesuffix("// changed\n"))
    first = (served.src / "unit.o").read_bytes()
    with machine(served, tmp_path, "two", store_url) as (broker, more, _):
        served.compile("-c", "unit.c", "-o", "unit.o", broker=broker.address)
        assert served.ran() == 1 and (served.src / "unit.o").read_bytes() == first
        assert broker.store.remote is not None and broker.store.remote.taken == 1
        assert broker.tally.cached == 1
    (record,) = (tmp_path / "two-objects" / "objects").glob("*/*.json")
    assert json.loads(record.read_text())["imported"] is True  # another machine's
    assert warnings == more == []


def test_a_poisoned_or_foreign_object_of_the_store_is_refused_and_compiled_here(
        served: Served, tmp_path: Path) -> None:
    with redis_server(tmp_path / "redis", PASSWORD) as url:
        with machine(served, tmp_path, "one", url) as (broker, _, _):
            served.compile("-c", "unit.c", "-o", "unit.o", broker=broker.address)
        client = redis.Redis.from_url(url)
        (name,) = client.keys("o/*")
        good = client.get(name)
        assert isinstance(good, bytes)
        client.set(name, good[:-8] + b"poisoned")
        with machine(served, tmp_path, "two", url) as (broker, warnings, _):
            served.compile("-c", "unit.c", "-o", "unit.o", broker=broker.address)
            assert broker.tally.compiled == 1 and warnings == []
        assert served.ran() == 2 and b"poisoned" not in (served.src / "unit.o").read_bytes()

        client.flushall()
        with machine(served, tmp_path, "foreign", url, key=b"another machine's key") as (
                broker, _, _):
            served.compile("-c", "unit.c", "-o", "unit.o", broker=broker.address)
        with machine(served, tmp_path, "three", url) as (broker, warnings, log):
            served.compile("-c", "unit.c", "-o", "unit.o", broker=broker.address)
            assert broker.tally.compiled == 1 and warnings == []
        assert served.ran() == 4
        assert "was not written under this cache's key" in log.read_text()


def test_a_store_that_is_down_or_hangs_costs_one_warning(served: Served, tmp_path: Path) -> None:
    """Down: nothing listens. Hanging: it takes the connection and never answers. Either way
    the build compiles every unit here, and says so once."""
    with socket.socket() as hanging:
        hanging.bind(("127.0.0.1", 0))
        hanging.listen(16)
        urls = {"down": f"redis://:{PASSWORD}@127.0.0.1:{free_port()}/0",
                "hanging": f"redis://:{PASSWORD}@127.0.0.1:{hanging.getsockname()[1]}/0"}
        for name, url in urls.items():
            with machine(served, tmp_path, name, url, timeout=1) as (broker, warnings, log):
                started = time.monotonic()
                for flags in ("-O1", "-O2", "-O3"):
                    served.compile(flags, "-c", "unit.c", "-o", "unit.o",
                                   broker=broker.address)
                assert time.monotonic() - started < 30
                assert broker.tally.compiled == 3
            assert len(warnings) == 1, warnings
            assert warnings[0].startswith("object store redis://127.0.0.1:")
            assert "building without it for the rest of this run" in warnings[0]
            assert PASSWORD not in warnings[0] + log.read_text()


def test_a_kernel_builder_unit_comes_from_the_store_as_well(tmp_path: Path) -> None:
    """The units the factory compiles itself (build.toml kernels) go through the same store:
    one machine's object is fetched by another, checked, and kept there as imported."""
    work = tmp_path / "build"
    (work / "src").mkdir(parents=True)
    (work / "src" / "a.cu").write_text("__global__ void k() {}\n")
    obj = work / "a.o"
    obj.write_bytes(b"\x7fELF an object")
    depfile = work / "a.d"
    depfile.write_text(f"{obj}: {work / 'src' / 'a.cu'}\n")
    identity = unit_identity(["nvcc", "-c", "src/a.cu", "-o", "a.o"], "nvcc 13", "_ns")
    warnings: list[str] = []
    with redis_server(tmp_path / "redis") as url:
        one = ObjectStore(tmp_path / "one", KEY, remote_store(url, "k", warnings.append))
        key = one.put(identity, "src/a.cu", work, obj, depfile, work, "_ns", False)
        two = ObjectStore(tmp_path / "two", KEY, remote_store(url, "k", warnings.append))
        target = work / "fetched.o"
        assert two.fetch(identity, work, "_ns", target, warnings.append) == key
        assert target.read_bytes() == b"\x7fELF an object" and two.imported(key)
        (work / "src" / "a.cu").write_text("__global__ void k2() {}\n")  # another input set
        assert ObjectStore(tmp_path / "three", KEY, remote_store(url, "k", warnings.append)) \
            .fetch(identity, work, "_ns", target, warnings.append) is None
    assert warnings == []


def test_a_file_that_changes_while_its_unit_compiles_keeps_nothing(served: Served) -> None:
    """Looked up with one version of a header, compiled with another (a build step that
    rewrote it meanwhile): which version went into the object is not known, so it is not
    kept."""
    served.compile("-c", "unit.c", "-o", "unit.o")
    (served.src / "unit.h").write_text("#define FACTOR 4\n")
    real = served.work / "real-gcc"  # the same compiler, which now rewrites the header first
    real.write_text(f'#!/bin/sh\necho ran >> {served.count}\n'
                    f'echo "#define FACTOR 5" > {served.src / "unit.h"}\n'
                    f'exec {shutil.which("gcc")} "$@"\n')
    served.compile("-c", "unit.c", "-o", "unit.o")
    assert "unit.c: compiled without the object cache: a file it read changed while it " \
           "compiled" in served.logged()
    assert served.broker.tally.compiled == 1  # the first compile only


def test_a_build_that_opens_connections_without_end_costs_no_more_threads(
        served: Served) -> None:
    """Connections that say nothing hold the broker's slots; one more is closed at once (its
    wrapper compiles without the cache), and the factory starts no thread for it."""
    idle = []
    before = threading.active_count()
    try:
        for _ in range(256):
            connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            connection.connect(served.broker.address)
            idle.append(connection)
        # connections wait in the socket's queue until the broker takes each into a thread
        deadline = time.monotonic() + 30
        while threading.active_count() < before + 256 and time.monotonic() < deadline:
            time.sleep(0.05)
        threads = threading.active_count()
        assert threads >= before + 256
        extra = []
        for _ in range(50):
            connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            connection.connect(served.broker.address)
            extra.append(connection)
        time.sleep(0.5)
        assert threading.active_count() <= threads + 1
        done = served.compile("-c", "unit.c", "-o", "unit.o")
        assert "the object cache did not answer" in done.stderr and served.ran() == 1
        for connection in extra:
            connection.close()
    finally:
        for connection in idle:
            connection.close()
    time.sleep(0.5)
    served.compile("-c", "unit.c", "-o", "unit.o")
    assert served.broker.tally.compiled == 1


def test_many_units_asking_at_once_are_all_served(served: Served) -> None:
    """A build tool that starts many compiles at the same moment (ninja with a high MAX_JOBS,
    most of them answered at once from the cache): every wrapper reaches the broker, none
    falls back to compiling without it."""
    count = 48
    for index in range(count):
        (served.src / f"unit{index}.c").write_text(UNIT.replace("scaled", f"scaled{index}"))
    compiler = served.compiler()

    def compile_all() -> list[subprocess.Popen[str]]:
        started = [subprocess.Popen([compiler, "-c", f"unit{index}.c", "-o", f"unit{index}.o"],
                                    cwd=served.src, stderr=subprocess.PIPE, text=True)
                   for index in range(count)]
        for process in started:
            process.wait()
        return started

    for round_ in ("compiled", "cached"):
        said = [process.stderr.read() for process in compile_all() if process.stderr]
        assert not [text for text in said if "did not answer" in text], round_
    assert served.broker.tally.compiled == served.broker.tally.cached == count
    assert served.ran() == count


def test_a_gated_build_compiles_the_longest_waiting_unit_first_and_one_at_a_time(
        served: Served, tmp_path: Path) -> None:
    """Where the broker orders a build's compiles (its tool was let start more than it has
    compilers), a unit waits for a compiler's place: here one place, taken by a first unit
    while the others are started together; they then compile one at a time, the longest as
    measured first; a command the cache cannot key waits for a place too."""
    events = tmp_path / "events"
    real = served.work / "real-gcc"
    real.write_text(f'#!/bin/sh\nfor a in "$@"; do case $a in *.c) src=$a;; esac; done\n'
                    f'echo "start $src" >> {events}\n'
                    'case $src in first.c) sleep 2;; *) sleep 0.5;; esac\n'
                    f'{shutil.which("gcc")} "$@"\n'
                    f'status=$?\necho "end $src" >> {events}\nexit $status\n')
    real.chmod(0o755)
    names = ("first", "short", "long", "middle")
    for name in names:
        (served.src / f"{name}.c").write_text(UNIT.replace("scaled", f"scaled_{name}"))
    costs = {"cell/first.c": UnitCost(1.0, None, 1), "cell/short.c": UnitCost(2.0, None, 1),
             "cell/long.c": UnitCost(90.0, None, 1), "cell/middle.c": UnitCost(30.0, None, 1)}
    gate = CompilePool(Budget(1, 2**62))
    timing = Timing(CompilePool(Budget(4, 2**30)), costs, lambda key, cost: None, "cell", 1)
    with open(tmp_path / "gated.log", "w") as handle, \
            ObjectBroker(served.store, "gcc of these tests\nproject one", Log(handle), timing,
                         gate=gate) as broker:
        compiler = served.compiler(broker.address)

        def start(*args: str) -> subprocess.Popen[str]:
            return subprocess.Popen([compiler, *args], cwd=served.src, stderr=subprocess.PIPE,
                                    text=True)

        first = start("-c", "first.c", "-o", "first.o")
        while not events.exists():
            time.sleep(0.05)
        waiting = [start("-c", f"{name}.c", "-o", f"{name}.o") for name in names[1:]]
        unkeyed = start("-c", "first.c", "middle.c")  # two sources: compiled without the cache
        for process in (first, *waiting, unkeyed):
            assert process.wait() == 0, process.stderr.read() if process.stderr else ""
            assert "did not answer" not in (process.stderr.read() if process.stderr else "")
        assert broker.tally.compiled == 4
    lines = events.read_text().splitlines()
    assert lines[0::2] == [f"start {name}" for name in
                           ("first.c", "long.c", "middle.c", "short.c", "middle.c")], lines
    assert all(end == "end " + begin.removeprefix("start ")
               for begin, end in zip(lines[0::2], lines[1::2], strict=True)), lines
