"""How many compilers run at once, and with how many threads each.

A build has a budget: cores (the CPUs this process may use, or --jobs) and memory (what was
free when it started, within its cgroup's limit, or --memory). A compiler is started when its
threads fit in the free cores and its estimated peak (plan/costs.py: measured by earlier builds,
else a safe default per thread) fits in the free memory; the one compiler of an otherwise idle
budget always starts. While many units wait, each compiler gets one thread; the last units of
a build share the free cores as nvcc threads (one per arch). The cells built at once share one
budget and one order: of the compilers waiting, the one with the longest estimate starts first,
whichever cell it belongs to (a long unit of one cell waiting behind short ones of another would
end the build late, its cores idle).

Each compiler runs in a process group of its own, so that stopping it (Ctrl-C, SIGTERM, the time
limit) stops everything it started; its peak memory is read from the kernel when it ends
(wait4: the largest resident set of it and its children).
"""

from __future__ import annotations

import heapq
import itertools
import math
import os
import shlex
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .. import defaults
from ..errors import BuildError, NotStarted, OutputOverflow, TimedOut
from ..system.process import Child, Log, log_result, not_found

__all__ = ["Budget", "CompilePool", "Finished", "Grant", "Stopped", "TimeLimitReached",
           "grace_for", "machine_budget"]

KILL_AFTER = 5.0  # seconds between SIGTERM and SIGKILL of a stopped compiler


class Stopped(BuildError):
    """The build was stopped (Ctrl-C, SIGTERM) while this compiler ran or waited."""


class TimeLimitReached(BuildError):
    """--time-limit: no compiler starts unless its estimate ends before it, and those still
    running when its grace ends are stopped."""

    def __init__(self, message: str, ran: float | None = None) -> None:
        super().__init__(message)
        self.ran = ran  # seconds the compiler stopped at the limit had run (None: none was)


@dataclass(frozen=True)
class Budget:
    cores: int
    memory: int  # bytes

    def share(self, parts: int) -> Budget:
        """One of `parts` equal shares (cells built at once in separate processes)."""
        parts = max(1, parts)
        return Budget(max(1, self.cores // parts), self.memory // parts)

    def describe(self) -> str:
        return f"{self.cores} core(s), {self.memory / 2**30:.1f} GiB"


@dataclass(frozen=True)
class Grant:
    threads: int
    memory: int


@dataclass(frozen=True)
class Finished:
    seconds: float
    peak: int | None  # bytes: the largest process's resident set (None: not measurable)


def grace_for(time_limit: float | None) -> float:
    """The seconds compilers running at a time limit of `time_limit` seconds may take to
    finish (defaults.TIME_LIMIT_GRACE)."""
    share, most = defaults.TIME_LIMIT_GRACE
    return 0.0 if time_limit is None else min(time_limit * share, most)


def machine_budget(jobs: int | None = None, memory: int | None = None) -> Budget:
    """This machine's budget, from the CPUs and free memory it gives this process (its cgroup's
    limits included), unless the user set either."""
    cores = jobs if jobs is not None else _cores()
    free = memory if memory is not None else int(_free_memory() * defaults.MEMORY_HEADROOM)
    return Budget(max(1, cores), max(1, free))


def _cores() -> int:
    count = len(os.sched_getaffinity(0))
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        if quota != "max":
            count = min(count, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):
        pass
    return max(1, count)


def _free_memory() -> int:
    free = _meminfo("MemAvailable")
    for limit_file, usage_file in (("memory.max", "memory.current"),
                                   ("memory/memory.limit_in_bytes",
                                    "memory/memory.usage_in_bytes")):
        try:
            limit = Path("/sys/fs/cgroup", limit_file).read_text().strip()
            usage = int(Path("/sys/fs/cgroup", usage_file).read_text())
        except (OSError, ValueError):
            continue
        if limit.isdigit() and int(limit) < free * 4:  # v1 writes "no limit" as a huge number
            free = min(free, max(0, int(limit) - usage))
    return free


def _meminfo(field: str) -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            name, _, value = line.partition(":")
            if name == field:
                return int(value.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 4 * 2**30


class CompilePool:
    """The budget the compilers of a build share, and the compilers it runs."""

    def __init__(self, budget: Budget, deadline: float | None = None, grace: float = 0.0) -> None:
        self.budget = budget
        self.deadline = deadline  # time.monotonic() after which nothing starts
        self.grace = grace  # seconds past the deadline a running compiler may take to finish
        self._condition = threading.Condition()
        self._cores_used = 0
        self._memory_used = 0
        self._running = 0
        self._waiting = 0
        self._queued: list[tuple[float, int]] = []  # (-estimate, arrival) of compilers waiting
        self._arrivals = itertools.count()
        self._stopped = False
        self._processes: set[Child] = set()
        self._opens = 0.0  # time.monotonic() before which no compiler is admitted

    def hold(self, seconds: float) -> None:
        """Admit no compiler for `seconds` from now: those that ask meanwhile are then admitted
        in their order (the longest first), not in the order they came."""
        with self._condition:
            self._opens = time.monotonic() + seconds

    @property
    def expired(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def fits(self, seconds: float) -> bool:
        """Whether a compiler started now and taking `seconds` ends before the deadline."""
        return self.deadline is None or time.monotonic() + seconds <= self.deadline

    @property
    def _overdue(self) -> bool:
        """Past the deadline and its grace: running compilers are stopped."""
        return self.deadline is not None and time.monotonic() >= self.deadline + self.grace

    def queue(self, count: int) -> None:
        """`count` more units will ask to be admitted (or be withdrawn)."""
        with self._condition:
            self._waiting += count

    def withdraw(self, count: int) -> None:
        with self._condition:
            self._waiting = max(0, self._waiting - count)
            self._condition.notify_all()

    @property
    def in_line(self) -> int:
        """Compilers waiting in admit() now."""
        with self._condition:
            return len(self._queued)

    def admit(self, useful_threads: int, memory: Callable[[int], int],
              estimate: float = 0.0) -> Grant:
        """Wait until a compiler that can use `useful_threads` threads and takes `memory(t)`
        bytes with t threads fits, and no compiler with a longer `estimate` (core-seconds)
        waits before it; its share."""
        with self._condition:
            ticket = (-estimate, next(self._arrivals))
            heapq.heappush(self._queued, ticket)
            try:
                while True:
                    self._check()
                    held = self._opens - time.monotonic()
                    grant = self._grant(useful_threads, memory) \
                        if self._queued[0] == ticket and held <= 0 else None
                    if grant is not None:
                        heapq.heappop(self._queued)
                        self._condition.notify_all()  # the next in line may fit too
                        return grant
                    timeout = None if self.deadline is None else self.deadline - time.monotonic()
                    if held > 0:
                        timeout = held if timeout is None else min(timeout, held)
                    self._condition.wait(timeout=max(0.0, timeout) if timeout is not None
                                         else None)
            except BaseException:
                if ticket in self._queued:
                    self._queued.remove(ticket)
                    heapq.heapify(self._queued)
                    self._condition.notify_all()
                raise

    def _grant(self, useful_threads: int, memory: Callable[[int], int]) -> Grant | None:
        """The share of a compiler starting now, or None while it does not fit."""
        free_cores = self.budget.cores - self._cores_used
        free_memory = self.budget.memory - self._memory_used
        if free_cores < 1:
            return None
        sharing = max(1, min(self._waiting, free_cores))
        threads = max(1, min(useful_threads, free_cores // sharing))
        while threads > 1 and memory(threads) > free_memory:
            threads -= 1
        need = memory(threads)
        if need > free_memory and self._running:
            return None
        self._cores_used += threads
        self._memory_used += need
        self._running += 1
        self._waiting = max(0, self._waiting - 1)
        return Grant(threads, need)

    @contextmanager
    def admitted(self, useful_threads: int, memory: Callable[[int], int],
                 estimate: float = 0.0) -> Iterator[Grant]:
        """admit() for the length of a with block, for a compiler queued before: withdrawn if it
        is never admitted (stopped, out of time), its share released when the block ends."""
        try:
            grant = self.admit(useful_threads, memory, estimate)
        except BaseException:
            self.withdraw(1)
            raise
        try:
            yield grant
        finally:
            self.release(grant)

    def release(self, grant: Grant) -> None:
        with self._condition:
            self._cores_used -= grant.threads
            self._memory_used -= grant.memory
            self._running -= 1
            self._condition.notify_all()

    def _check(self) -> None:
        if self._stopped:
            raise Stopped("the build was stopped")
        if self.expired:
            raise TimeLimitReached("the time limit was reached")

    def stop(self) -> None:
        """Stop every compiler now, and admit none from now on."""
        with self._condition:
            self._stopped = True
            processes = list(self._processes)
            self._condition.notify_all()
        for process in processes:
            process.signal(signal.SIGTERM)

    def run(self, argv: Sequence[str], cwd: Path | None, log: Log, what: str,
            measure: bool = True, env: Mapping[str, str] | None = None) -> Finished:
        """Run one compiler to its end; its output (at most LOG_OUTPUT_LIMIT bytes) goes to
        the log as one block. A failure raises BuildError; the stop or the time limit end it
        early (Stopped, TimeLimitReached); so does running past COMPILER_TIMEOUT (TimedOut)
        or printing past the cap (OutputOverflow)."""
        command = [str(arg) for arg in argv]
        started = time.monotonic()
        with self._condition:
            self._check()
            try:
                process = Child(command, cwd=cwd, env=env, merged=True, what=what)
            except NotStarted:
                raise not_found(command, what) from None
            self._processes.add(process)
        chunks = bytearray()
        overflowed = threading.Event()
        stream = process.popen.stdout
        assert stream is not None

        def drain() -> None:
            while chunk := stream.read(1 << 16):
                if len(chunks) + len(chunk) > defaults.LOG_OUTPUT_LIMIT:
                    overflowed.set()
                    process.signal()
                    return
                chunks.extend(chunk)

        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        try:
            status, peak = self._wait(process, started)
        finally:
            with self._condition:
                self._processes.discard(process)
            process.close()
        reader.join(timeout=5)
        output = chunks.decode(errors="replace")
        if self._stopped or status is None or overflowed.is_set():
            log.write(f"$ {shlex.join(command)}\n{output}")
            if self._stopped:
                raise Stopped(f"{what}: stopped")
            if overflowed.is_set():
                raise OutputOverflow(f"{what} printed more than {defaults.LOG_OUTPUT_LIMIT} "
                                     "bytes; it was stopped")
            if time.monotonic() - started >= defaults.COMPILER_TIMEOUT:
                raise TimedOut(f"{what} ran past {defaults.COMPILER_TIMEOUT} s and was "
                               "stopped", defaults.COMPILER_TIMEOUT)
            raise TimeLimitReached(f"{what}: stopped at the time limit",
                                   ran=time.monotonic() - started)
        log_result(command, output, status, log, what)
        return Finished(time.monotonic() - started, peak if measure else None)

    def _wait(self, process: Child, started: float) -> tuple[int | None, int | None]:
        """(exit status, peak bytes); status None when the deadline, or the compiler's own
        limit, stopped it."""
        signalled_at: float | None = None
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                process.popen.returncode = os.waitstatus_to_exitcode(status)
                if signalled_at is not None and not self._stopped:
                    return None, None
                return process.popen.returncode, usage.ru_maxrss * 1024
            now = time.monotonic()
            if signalled_at is None and (self._stopped or self._overdue
                                         or now - started >= defaults.COMPILER_TIMEOUT):
                process.signal(signal.SIGTERM)
                signalled_at = now
            elif signalled_at is not None and now - signalled_at > KILL_AFTER:
                process.signal(signal.SIGKILL)
            time.sleep(0.05)
