"""Every program the factory starts starts here (the container engine's docker commands in
engine.py aside): in a process group of its own, with a time limit and a cap on what it may
print, its output captured whole or streamed into a cell's log, and without the secrets of the
factory's environment (trust/credentials.py: without_inherited_secrets)."""

from __future__ import annotations

import codecs
import contextlib
import os
import re
import shlex
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, TextIO

from .. import defaults
from ..errors import BuildError, CommandFailed, NotStarted, OutputOverflow, ProcessError, TimedOut
from ..trust.credentials import passed_environment, redact, without_inherited_secrets

__all__ = ["Child", "Completed", "Log", "NotStarted", "OutputOverflow", "ProcessError",
           "GPU_VARIABLES", "TimedOut", "bounded_run", "first_error", "first_output_line",
           "foreign_environment", "kernel_environment",
           "log_result", "not_found", "run", "streamed_run"]

Completed = subprocess.CompletedProcess
"""What a command that ran to its end gave: args, returncode, stdout, stderr."""


class Log:
    """A cell's log file, safe to write from the threads that compile its sources."""

    def __init__(self, handle: TextIO) -> None:
        self._handle = handle
        self._lock = threading.Lock()

    def write(self, text: str) -> None:
        """Add a line (or block) to the log, URL credentials and the environment's secrets
        masked: logs are output a user may share, whatever a build printed into them."""
        text = redact(text)
        with self._lock:
            self._handle.write(text if text.endswith("\n") else text + "\n")
            self._handle.flush()

    def step(self, title: str) -> None:
        self.write(f"\n==> {title}")


def run(argv: Sequence[str | Path], log: Log, *, timeout: float, cwd: Path | None = None,
        env: dict[str, str] | None = None, what: str | None = None) -> str:
    """Run a command to its end within `timeout` seconds; its output (stdout and stderr
    together, at most LOG_OUTPUT_LIMIT bytes) goes to the log as one block. It failing raises
    CommandFailed; not starting, BuildError; running past its time, TimedOut."""
    command = [str(arg) for arg in argv]
    merged_env = None if env is None else {**os.environ, **env}
    try:
        result = bounded_run(command, timeout, defaults.LOG_OUTPUT_LIMIT, env=merged_env,
                             cwd=cwd, merged=True, what=what)
    except NotStarted:
        raise not_found(command, what) from None
    log_result(command, result.stdout, result.returncode, log, what)
    return result.stdout


class Child:
    """A program started in a process group of its own (Ctrl-C reaches the factory, which ends
    its children itself), whose whole group a signal reaches. The one place a program starts:
    the bounded runs below, the compile pool and git's batch reader build on it."""

    def __init__(self, argv: Sequence[str | Path], *, cwd: Path | None = None,
                 env: Mapping[str, str] | None = None, stdin: bool = False,
                 merged: bool = False, what: str | None = None) -> None:
        self.command = [str(arg) for arg in argv]
        try:
            self.popen = subprocess.Popen(
                self.command, cwd=cwd, env=without_inherited_secrets(env),
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT if merged else subprocess.PIPE,
                start_new_session=True)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise NotStarted(f"{what or self.command[0]}: {self.command[0]} cannot be run "
                             f"({reason})", reason) from None

    @property
    def pid(self) -> int:
        return self.popen.pid

    def signal(self, number: int = signal.SIGKILL) -> None:
        """Send a signal to the program and everything it started (gone already: nothing)."""
        with contextlib.suppress(OSError):
            os.killpg(self.popen.pid, number)

    def wait(self, timeout: float, what: str | None = None) -> int:
        """Its exit status; past `timeout` seconds the group is killed and TimedOut raised."""
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.signal()
            self.popen.wait()
            raise TimedOut(f"{what or Path(self.command[0]).name} ran past its time limit "
                           f"({timeout:g} s) and was stopped", timeout) from None

    def close(self) -> None:
        """Kill what is left of the group and reap the program."""
        self.signal()
        for stream in (self.popen.stdin, self.popen.stdout, self.popen.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self.popen.wait()

    def expire_after(self, seconds: float) -> threading.Timer:
        """Kill the group once `seconds` have passed (for a program the caller talks to, such
        as a batch reader, whose reads would otherwise wait on it forever); cancel the timer
        when done."""
        timer = threading.Timer(seconds, self.signal)
        timer.daemon = True
        timer.start()
        return timer


def bounded_run(argv: Sequence[str | Path], timeout: float,
                limit: int = defaults.PROBE_OUTPUT_LIMIT, env: Mapping[str, str] | None = None,
                cwd: Path | None = None, *, input: str | bytes | None = None,
                merged: bool = False, what: str | None = None) -> Completed[str]:
    """Run a command to its end and give its output as text (stderr apart unless `merged`):
    it runs in a process group of its own, which is killed when it runs past `timeout`
    (TimedOut) or prints more than `limit` bytes on a stream (OutputOverflow), so that neither
    a hung nor a flooding program holds the factory or its memory. `input` is written to its
    standard input."""
    child = Child(argv, cwd=cwd, env=env, stdin=input is not None, merged=merged, what=what)
    outputs = (bytearray(), bytearray())
    overflowed = threading.Event()

    def drain(stream: IO[bytes], into: bytearray) -> None:
        while chunk := stream.read(1 << 16):
            if len(into) + len(chunk) > limit:
                overflowed.set()
                child.signal()
                return
            into += chunk

    def feed(stream: IO[bytes], data: bytes) -> None:
        with contextlib.suppress(OSError):  # a program that does not read it all
            stream.write(data)
            stream.close()

    streams = ((child.popen.stdout, outputs[0]), (child.popen.stderr, outputs[1]))
    helpers = [threading.Thread(target=drain, args=(stream, into), daemon=True)
               for stream, into in streams if stream is not None]
    if input is not None and child.popen.stdin is not None:
        data = input.encode() if isinstance(input, str) else input
        helpers.append(threading.Thread(target=feed, args=(child.popen.stdin, data),
                                        daemon=True))
    for helper in helpers:
        helper.start()
    try:
        status = child.wait(timeout, what)
    finally:
        for helper in helpers:
            helper.join(timeout=5)
    if overflowed.is_set():
        raise OutputOverflow(f"{what or Path(child.command[0]).name} printed more than "
                             f"{limit} bytes")
    return subprocess.CompletedProcess(child.command, status,
                                       outputs[0].decode(errors="replace"),
                                       outputs[1].decode(errors="replace"))


_STREAM_CHUNK = 1 << 16


def streamed_run(argv: Sequence[str], log: Log, timeout: float,
                 env: Mapping[str, str] | None = None, cwd: Path | None = None,
                 limit: int = defaults.LOG_OUTPUT_LIMIT) -> int:
    """Run a long command (a kernel's test suite) with each line of its output written to the
    log as it comes, and give its exit status. It runs in a process group of its own, all of
    which is killed when it runs past `timeout` (TimedOut) or prints more than `limit` bytes
    (OutputOverflow): a hung test, a flood, or a worker it left holding the output open,
    cannot hold the factory."""
    child = Child(argv, cwd=cwd, env=env, merged=True)
    overflowed = threading.Event()

    def drain() -> None:
        # What is there is read at once and written as whole lines, one masked block per read:
        # a line at a time, masking and flushing each, fell behind a test that prints fast.
        assert child.popen.stdout is not None
        stream, decoder = child.popen.stdout.fileno(), codecs.getincrementaldecoder("utf-8")(
            errors="replace")
        written, pending = 0, ""
        while chunk := os.read(stream, _STREAM_CHUNK):
            written += len(chunk)
            if written > limit:
                overflowed.set()
                child.signal()
                break
            pending += decoder.decode(chunk)
            cut = pending.rfind("\n") + 1 or (len(pending) if len(pending) >= _STREAM_CHUNK else 0)
            if cut:
                log.write(pending[:cut].rstrip("\n"))
                pending = pending[cut:]
        if pending:
            log.write(pending)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        status = child.wait(timeout)
    finally:  # what the command left running goes with it
        child.signal()
        reader.join(timeout=5)
        if not reader.is_alive() and child.popen.stdout is not None:
            child.popen.stdout.close()
    if overflowed.is_set():
        raise OutputOverflow(f"{Path(child.command[0]).name} printed more than {limit} bytes")
    return status


def foreign_environment(folder: Path, environ: Mapping[str, str] | None = None,
                        prefixes: tuple[str, ...] = ()) -> dict[str, str]:
    """The environment for someone else's code (a project's setup.py, a kernel's tests): what
    passed_environment lets through of `environ`, with HOME, TMPDIR and the cache folder made
    inside `folder`, so that nothing of the factory's secrets or the user's home reaches it."""
    home, tmp = folder / "home", folder / "tmp"
    home.mkdir(parents=True, exist_ok=True)
    tmp.mkdir(parents=True, exist_ok=True)
    # a login name: in a container the build user has no passwd entry, and getpass.getuser()
    # (torch's compile caches ask it) looks at these first
    user = (environ if environ is not None else os.environ).get("USER") or "builder"
    return {**passed_environment(environ, prefixes), "HOME": str(home), "TMPDIR": str(tmp),
            "XDG_CACHE_HOME": str(home / ".cache"), "USER": user, "LOGNAME": user}


# What of the factory's environment reaches a kernel's code beside the allow-list: the variables
# that choose and tune its GPU (CUDA_VISIBLE_DEVICES, TORCH_CUDA_ARCH_LIST, TRITON_*, ...)
GPU_VARIABLES = ("CUDA_", "NVIDIA_", "HIP_", "ROCR_", "TORCH_", "TRITON_", "NCCL_", "OMP_")


def kernel_environment(folder: Path, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a kernel's own code (its import gate, its tests): foreign_environment
    with the GPU's variables, no user site folder and no bytecode written."""
    return {**foreign_environment(folder, environ, GPU_VARIABLES), "PYTHONNOUSERSITE": "1",
            "PYTHONDONTWRITEBYTECODE": "1"}


def not_found(command: Sequence[str], what: str | None = None) -> BuildError:
    return BuildError(f"{what or command[0]}: command not found: {command[0]}")


def log_result(command: Sequence[str], output: str, status: int, log: Log,
               what: str | None = None) -> None:
    """A finished command's output into the log as one block; BuildError when it failed."""
    log.write(f"$ {shlex.join(command)}\n{output}")
    if status != 0:
        raise CommandFailed(f"{what or Path(command[0]).name} failed (exit {status}): "
                            f"{first_error(output)}", output)


# A compiler's diagnostic: gcc's `file:12:5: error:`, nvcc's `file(12): error:`, `nvcc fatal`.
_COMPILER_ERROR = re.compile(r"(:\d+(:\d+)?|\(\d+\)): (fatal )?error\b|^nvcc fatal\b|"
                             r"^(cc1plus|g\+\+|gcc|c\+\+): (fatal )?error\b")


def first_error(output: str) -> str:
    """The line a person wants to see first: the first compiler error (also where a build
    system's traceback follows it), else a traceback's last line, else the first line that
    says error, else the last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    compiler = next((line for line in lines if _COMPILER_ERROR.search(line)), None)
    if compiler is not None:
        return compiler[:300]
    if "Traceback (most recent call last)" in output:
        return lines[-1][:300]
    for line in lines:
        lowered = line.lower()
        if "error" in lowered and "warning" not in lowered:
            return line[:300]
    return lines[-1][:300] if lines else "no output"


def first_output_line(argv: Sequence[str | Path],
                      timeout: float = defaults.COMPILER_PROBE_TIMEOUT) -> str:
    """The first line a tool prints (its version, say); "missing" when it cannot be run."""
    try:
        done = bounded_run(argv, timeout)
    except ProcessError:
        return "missing"
    return (done.stdout.strip().splitlines() or ["unknown"])[0]
