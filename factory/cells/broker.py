"""The object cache's broker for a build that writes its own compile commands (a setup.py /
pyproject project's): the factory's end of the compiler wrappers' socket
(data/compilers/cached.py is the other end). On this machine the broker serves a build it
runs itself; for a build in a builder container, the docker runner serves it from outside the
container, whose wrappers reach the socket through a mounted folder.

Where earlier builds measured more of a cell's units than it has compilers at once, the build
tool is let start them all (MAX_JOBS, up to a window) and the broker decides which compile runs:
of those waiting, the longest as measured, so that the build's last minutes are not one long
unit its tool happened to start late. A compile holds its place while its connection is open.

The project's build runs confined, and so do its compiler wrappers: they cannot write into the
cache and never see its key. For each compile they ask the broker, a thread of the factory
listening on a Unix socket in a private folder of its own (the build sees every folder
read-only, and may connect): the input sets seen for the command, then the object of the set
whose files they found unchanged, and after a compile they hand over the object with its
inputs and their hashes, which the broker signs and keeps.

A build is the project's own code, so what its wrappers say is believed only about that
project: every unit's identity names the project's source (its kind and location: a folder,
a repository's URL and subfolder, a Hub repo) besides the command, its folder, the environment
the compilers read and what the compilers are. A hostile build can fill its own project's
entries with anything, which it could compile into its wheel anyway; no other project's build
ever reads them, and kernel-builder cells' entries have identities of another form. The broker
reads no path a wrapper names, bounds what it takes (header, object size, connections at once,
time without a word) and writes what a build said to the log only as printable text.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import socketserver
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from .. import defaults
from ..compile.held import cell_holdings
from ..compile.objects import ObjectStore
from ..compile.pool import Budget, CompilePool, Stopped, TimeLimitReached
from ..data.compilers.cached import DATE_MARKER, ENVIRONMENT, receive, receive_payload, send
from ..plan.costs import UnitCost
from ..plan.model import Cell
from ..sources.tree import SourceTree
from ..system.process import Log
from .job import Built, Compiling

__all__ = ["ObjectBroker", "Tally", "Timing", "build_jobs", "cell_broker", "compiler_threads",
           "holdings_of", "say_tally", "shard_of_unit", "source_identity", "stopped"]

FORMAT = 1
SOURCE_FOLDER = "$WORK/src/"  # where the project's staged sources lie, as units name them
_CONNECTIONS = 256  # answered at once; more are closed
_WINDOW = _CONNECTIONS - 16  # compiles a gated build's tool may start at once (each holds one)
_IDLE = 120.0  # seconds a connection may say nothing
_GATHER = 2.0  # seconds a gated build's first compiles wait for the others its tool started
_MAX_ARGS = 20_000
_MAX_INPUTS = 100_000
_HEX = re.compile(r"[0-9a-f]{64}")


def compiler_threads(threads: int, src: Path) -> int:
    """The threads each nvcc of a build of `threads` compilers gets (NVCC_THREADS): the cores
    its CUDA sources leave idle, shared."""
    sources = sum(1 for _ in src.rglob("*.cu"))
    return max(1, threads // max(1, min(threads, sources)))


def build_jobs(compilers: int, costs: Mapping[str, UnitCost], cell: str) -> int:
    """MAX_JOBS for a project build of `compilers` at once: where earlier builds measured more
    of the cell's units than that, as many as they measured (within the window), so that its
    tool starts them together and the broker orders them; else `compilers`."""
    known = sum(1 for key in costs if key.startswith(f"{cell}/"))
    return max(compilers, min(known, _WINDOW))


def cell_broker(cell: Cell, store: ObjectStore, compilers: str, log: Log, compiling: Compiling,
                threads: int, at_once: int) -> ObjectBroker:
    """The broker of a cell's project build: its units' identities name `compilers` (what they
    are, or the image that holds them) and the project, under the run's time limit and cost
    book (`at_once` compilers, each running `threads` threads), for its unit shard, keeping
    holdings. It orders the compiles where build_jobs lets the tool start more than
    `at_once`."""
    pool = compiling.pool
    gate = CompilePool(Budget(at_once, 2**62), pool.deadline, pool.grace) \
        if build_jobs(at_once, compiling.costs, cell.key) > at_once else None
    return ObjectBroker(store, f"{compilers}\nproject {source_identity(cell.source)}", log,
                        Timing(pool, compiling.costs, compiling.measured, cell.key, threads),
                        compiling.shard, holdings_of(cell), gate)


def holdings_of(cell: Cell) -> str:
    """Where the holdings of a cell's units are kept (compile/held.py): named as its objects'
    identities name it, by the cell's key (its build folder) and, for a project whose build
    writes its own commands, by the project too (source_identity)."""
    return cell_holdings(source_identity(cell.source) if cell.kind.units_seen else "",
                         cell.key)


def source_identity(source: SourceTree) -> str:
    """Which project a build is, for its units' identities: the same for every revision of it
    (a changed file must not turn every unit into a miss), different for any other project."""
    where = str(source.root) if source.kind == "path" else source.location
    return json.dumps([source.kind, where, source.subdir])


@dataclass
class Tally:
    """What the build's compiles came to: units served by the cache, compiled (and kept), and
    compiled without it (why, per unit)."""

    cached: int = 0
    compiled: int = 0
    uncached: list[tuple[str, str]] = field(default_factory=list)
    late: list[str] = field(default_factory=list)  # not started: the time limit would end them
    foreign: int = 0  # other shards' units (--unit-shard), not compiled here
    seconds: float = 0.0  # compiler time of the units compiled

    @property
    def units(self) -> int:
        return self.cached + self.compiled + len(self.uncached)

    def built(self, wheel: Path | None) -> Built:
        """What building gave, counted as the broker saw it (compiled: with the cache or
        without)."""
        return Built(wheel, self.units, self.compiled + len(self.uncached), self.cached)


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 1024  # connections waiting to be accepted (listen's backlog): a
    # build tool starts as many compiles at once as it has jobs
    broker: ObjectBroker

    def process_request(self, request: Any, client_address: Any) -> None:
        """A thread for the connection, while fewer than _CONNECTIONS are answered; beyond,
        it is closed at once (its wrapper compiles without the cache): a build that opens
        connections without end costs the factory no more threads."""
        if not self.broker.slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.broker.slots.release()
            raise


class _Handler(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        broker = self.server.broker
        try:
            connection: socket.socket = self.request
            connection.settimeout(_IDLE)
            broker.answer(connection, receive(connection))
        except (OSError, ValueError, KeyError, TypeError):
            return  # a wrapper that went away or spoke nonsense: it compiles on its own
        finally:
            broker.slots.release()


@dataclass(frozen=True)
class Timing:
    """The build's time limit and cost book as the broker applies them to its units: a unit
    whose compile would end past the limit (as earlier builds measured it) is not started, and
    what each compile took is measured. A unit's cost key is the cell's key and its source."""

    pool: CompilePool
    costs: Mapping[str, UnitCost]
    measured: Callable[[str, UnitCost], None]
    cell: str
    threads: int  # each compiler's threads (NVCC_THREADS)

    def key(self, source: str) -> str:
        return f"{self.cell}/{source.removeprefix(SOURCE_FOLDER)}"

    def estimate(self, source: str) -> float:
        """The unit's core-seconds: as measured, else as the slowest unit of the cell measured
        so far (a project's units are one family, often alike)."""
        known = self.costs.get(self.key(source))
        if known is None:
            return max((cost.seconds for key, cost in self.costs.items()
                        if key.startswith(f"{self.cell}/")), default=0.0)
        return known.seconds

    def may_start(self, source: str) -> bool:
        """Whether the unit's compile, started now, ends before the limit."""
        return self.pool.fits(self.estimate(source) / self.threads)

    def ran(self, source: str, seconds: float) -> None:
        self.measured(self.key(source), UnitCost(seconds * self.threads, None, 1))


class ObjectBroker:
    """Serves one build's compiler wrappers from `store`, while the `with` block lasts.
    `base` is what every unit's identity holds besides its command: what the compilers are and
    which project this is."""

    def __init__(self, store: ObjectStore, base: str, log: Log, timing: Timing | None = None,
                 shard: tuple[int, int] | None = None, holdings: str | None = None,
                 gate: CompilePool | None = None) -> None:
        self.store, self.base, self.log, self.timing = store, base, log, timing
        self.shard = shard
        self.holdings = holdings  # the cell's holdings, where a plan finds its units
        # (compile/held.py)
        self.gate = gate  # the compiles that run at once, longest first (None: as the tool
        # starts them)
        self._gathering = False
        self.tally = Tally()
        self.slots = threading.BoundedSemaphore(_CONNECTIONS)
        self._lock = threading.Lock()
        self._folder: Path | None = None
        self._server: _Server | None = None

    @property
    def address(self) -> str:
        assert self._folder is not None
        return str(self._folder / "objects.sock")

    def __enter__(self) -> ObjectBroker:
        # A folder of its own (Unix socket paths are short): the build can connect to the
        # socket, not replace it.
        self._folder = Path(tempfile.mkdtemp(prefix="kwf-objects-"))
        self._server = _Server(self.address, _Handler)
        self._server.broker = self
        threading.Thread(target=self._server.serve_forever, name="object-broker",
                         daemon=True).start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self.gate is not None:
            self.gate.stop()  # compiles still waiting are let go
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)

    # -- answering ---------------------------------------------------------------------------

    def identity(self, request: dict[str, Any]) -> str:
        argv, cwd, env = request["argv"], request["cwd"], request["env"]
        if not (isinstance(argv, list) and 0 < len(argv) <= _MAX_ARGS and
                all(isinstance(arg, str) for arg in argv) and isinstance(cwd, str) and
                isinstance(env, dict) and set(env) <= set(ENVIRONMENT) and
                all(value is None or isinstance(value, str) for value in env.values())):
            raise ValueError("a malformed request")
        text = json.dumps({"format": FORMAT, "kind": "pep517", "base": self.base, "argv": argv,
                           "cwd": cwd, "env": dict(sorted(env.items()))})
        return hashlib.sha256(text.encode()).hexdigest()

    def answer(self, connection: socket.socket, request: dict[str, Any]) -> None:
        identity = self.identity(request)
        source = _printable(request.get("source"))
        op = request.get("op")
        if op == "find":
            start = self.timing is None or self.timing.may_start(source)
            remote = self.store.remote is not None and self.store.remote.up
            entries = self.store.remote_entries(identity) if request.get("remote") is True \
                else self.store.entries(identity)
            send(connection, {"entries": entries, "start": start, "remote": remote,
                              "mine": self.shard is None or shard_of_unit(
                                  source, self.shard[1]) == self.shard[0],
                              "gate": self.gate is not None})
        elif op == "foreign":  # another shard's, not in the cache: left to that shard
            with self._lock:
                self.tally.foreign += 1
            send(connection, {"ok": True})
        elif op == "late":  # found no object and may not start: left for the next build
            self._late(source)
            send(connection, {"ok": True})
        elif op == "start":  # a compile about to run, in a gated build: it waits its turn
            self._start(connection, source, bounded=request.get("bounded") is not False)
        elif op == "take":
            handle = self.store.open_checked(identity, str(request.get("object")),
                                             self.log.write)
            if handle is None:
                send(connection, {"ok": False})
                return
            with handle:
                size = os.fstat(handle.fileno()).st_size
                send(connection, {"ok": True, "size": size}, handle, size)
            self._note(source, "from the object cache", cached=1)
        elif op == "store":
            self._keep(connection, identity, source, request)
        elif op == "skip":
            why = _printable(request.get("why"))
            with self._lock:
                self.tally.uncached.append((source, why))
            self.log.write(f"   {source}: compiled without the object cache: {why}")
            send(connection, {"ok": True, "gate": self.gate is not None})

    def _late(self, source: str) -> None:
        with self._lock:
            self.tally.late.append(source)
        self.log.write(f"   {source}: not started, the time limit would end it")

    def _start(self, connection: socket.socket, source: str, bounded: bool) -> None:
        """Let a compile run once it is the longest of those waiting and a compiler's place is
        free, or tell it the time limit would end it (`bounded`: a unit the cache keeps; one
        it cannot is needed by the build whatever the time); its place is free again when its
        connection closes (its compile ended, or its wrapper went away)."""
        gate = self.gate
        if gate is None:
            send(connection, {"go": True})
            return
        estimate = self.timing.estimate(source) if self.timing is not None else 0.0
        with self._lock:
            if not self._gathering:  # the tool starts its compiles together: let them all ask
                self._gathering = True
                gate.hold(_GATHER)
        gate.queue(1)
        try:
            with gate.admitted(1, lambda threads: 0, estimate):
                if bounded and self.timing is not None and not self.timing.may_start(source):
                    raise TimeLimitReached("the time limit would end it")
                send(connection, {"go": True})
                connection.settimeout(defaults.COMPILER_TIMEOUT)
                while connection.recv(1):
                    pass
        except TimeLimitReached:
            if bounded:
                self._late(source)
            send(connection, {"late": True} if bounded else {"go": True})
        except Stopped:
            return

    def _keep(self, connection: socket.socket, identity: str, source: str,
              request: dict[str, Any]) -> None:
        inputs, size, seconds = request["inputs"], request["size"], request["seconds"]
        if not (isinstance(inputs, list) and len(inputs) <= _MAX_INPUTS and
                all(_input(item) for item in inputs) and isinstance(size, int) and
                0 < size <= defaults.MAX_OBJECT_SIZE and
                isinstance(seconds, (int, float)) and 0 <= seconds < 10**7):
            raise ValueError("a malformed object")

        def fill(target: Path) -> None:
            with open(target, "wb") as out:
                for chunk in receive_payload(connection, size):
                    out.write(chunk)

        unit = source.removeprefix(SOURCE_FOLDER)
        self.store.keep(identity, source, inputs, fill,
                        None if self.holdings is None else (self.holdings, unit))
        send(connection, {"ok": True})
        if self.timing is not None:
            self.timing.ran(source, float(seconds))
        threads = f" with {self.timing.threads} thread(s)" if self.timing else ""
        self._note(source, f"compiled in {seconds:.1f} s{threads}, kept in the object cache",
                   compiled=1, seconds=float(seconds))

    def _note(self, source: str, what: str, cached: int = 0, compiled: int = 0,
              seconds: float = 0.0) -> None:
        with self._lock:
            self.tally.cached += cached
            self.tally.compiled += compiled
            self.tally.seconds += seconds
        self.log.write(f"   {source}: {what}")


def shard_of_unit(source: str, count: int) -> int:
    """The shard (1 to `count`) that compiles a unit of a build whose units are known only as
    it runs: every machine puts a source in the same one, whatever else it has seen."""
    name = source.removeprefix(SOURCE_FOLDER).encode()
    return int.from_bytes(hashlib.sha256(name).digest()[:8], "big") % count + 1


def say_tally(log: Log, tally: Tally) -> None:
    log.write(f"object cache: {tally.units} unit(s): {tally.cached} from the cache, "
              f"{tally.compiled} compiled and kept ({tally.seconds:.1f} s of compiler time)"
              + (f", {len(tally.uncached)} compiled without it" if tally.uncached else ""))


def stopped(log: Log, tally: Tally) -> TimeLimitReached:
    """The time limit's end of a build the broker served: what it kept."""
    say_tally(log, tally)
    kept = tally.compiled + tally.cached
    late = f" ({len(tally.late)} not started, the limit would end them)" if tally.late else ""
    return TimeLimitReached(f"stopped at the time limit with {kept} unit(s) of the project's "
                            f"build in the object cache{late}; the next build compiles only "
                            "the others")


def _input(item: Any) -> bool:
    """Whether an input set's entry is [path, sha256] (or the date marker and a time)."""
    return isinstance(item, list) and len(item) == 2 and \
        all(isinstance(part, str) and len(part) <= 4096 for part in item) and \
        (_HEX.fullmatch(item[1]) is not None or item[0] == DATE_MARKER)


def _printable(value: Any, limit: int = 300) -> str:
    """What a build said, as the log may show it."""
    text = value if isinstance(value, str) else "?"
    return "".join(char for char in text if char.isprintable())[:limit] or "?"
