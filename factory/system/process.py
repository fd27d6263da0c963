"""Running tools with their output captured in a cell's log."""

from __future__ import annotations

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
from ..errors import BuildError, CommandFailed
from ..trust.credentials import passed_environment, redact

__all__ = ["Log", "OutputOverflow", "bounded_run", "first_error", "first_output_line",
           "foreign_environment", "log_result", "not_found", "run", "streamed_run"]


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


def run(argv: Sequence[str | Path], log: Log, *, cwd: Path | None = None,
        env: dict[str, str] | None = None, what: str | None = None) -> str:
    """Run a command; its output goes to the log as one block. Failure raises BuildError."""
    command = [str(arg) for arg in argv]
    merged_env = None if env is None else {**os.environ, **env}
    try:
        result = subprocess.run(command, cwd=cwd, env=merged_env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace")
    except FileNotFoundError:
        raise not_found(command, what) from None
    log_result(command, result.stdout, result.returncode, log, what)
    return result.stdout


class OutputOverflow(subprocess.SubprocessError):
    """A command printed more than bounded_run takes; it was killed."""


def bounded_run(argv: Sequence[str], timeout: float, limit: int = defaults.PROBE_OUTPUT_LIMIT,
                env: Mapping[str, str] | None = None,
                cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run a command to its end and give its output, for commands whose output is read whole
    (probes of an interpreter or an image the user named): it runs in a process group of its
    own, which is killed when it runs past `timeout` (TimeoutExpired) or prints more than
    `limit` bytes on either stream (OutputOverflow), so that neither a hung nor a flooding
    program holds the factory or its memory."""
    process = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               start_new_session=True, env=None if env is None else dict(env),
                               cwd=cwd)
    outputs = (bytearray(), bytearray())
    overflowed = threading.Event()

    def kill() -> None:
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGKILL)

    def drain(stream: IO[bytes], into: bytearray) -> None:
        while chunk := stream.read(1 << 16):
            if len(into) + len(chunk) > limit:
                overflowed.set()
                kill()
                return
            into += chunk

    readers = [threading.Thread(target=drain, args=(stream, into), daemon=True)
               for stream, into in ((process.stdout, outputs[0]), (process.stderr, outputs[1]))
               if stream is not None]
    for reader in readers:
        reader.start()
    try:
        status = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill()
        process.wait()
        raise
    finally:
        for reader in readers:
            reader.join(timeout=5)
    if overflowed.is_set():
        raise OutputOverflow(f"printed more than {limit} bytes")
    return subprocess.CompletedProcess(list(argv), status,
                                       outputs[0].decode(errors="replace"),
                                       outputs[1].decode(errors="replace"))


def streamed_run(argv: Sequence[str], log: Log, timeout: float,
                 env: Mapping[str, str] | None = None, cwd: Path | None = None) -> int:
    """Run a long command (a kernel's test suite) with each line of its output written to the
    log as it comes, and give its exit status. It runs in a process group of its own, all of
    which is killed when it runs past `timeout` (TimeoutExpired): a hung test, or a worker it
    left holding the output open, cannot hold the factory."""
    process = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               start_new_session=True, env=None if env is None else dict(env),
                               cwd=cwd, text=True, errors="replace")

    def drain() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            log.write(line.rstrip("\n"))

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        return process.wait(timeout=timeout)
    finally:  # what the command left running goes with it
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        reader.join(timeout=5)
        if not reader.is_alive() and process.stdout is not None:
            process.stdout.close()


def foreign_environment(folder: Path, environ: Mapping[str, str] | None = None,
                        prefixes: tuple[str, ...] = ()) -> dict[str, str]:
    """The environment for someone else's code (a project's setup.py, a kernel's tests): what
    passed_environment lets through of `environ`, with HOME, TMPDIR and the cache folder made
    inside `folder`, so that nothing of the factory's secrets or the user's home reaches it."""
    home, tmp = folder / "home", folder / "tmp"
    home.mkdir(parents=True, exist_ok=True)
    tmp.mkdir(parents=True, exist_ok=True)
    return {**passed_environment(environ, prefixes), "HOME": str(home), "TMPDIR": str(tmp),
            "XDG_CACHE_HOME": str(home / ".cache")}


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


def first_output_line(argv: Sequence[str]) -> str:
    """The first line a tool prints (its version, say); "missing" when it cannot be run."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True)
    except OSError:
        return "missing"
    return (done.stdout.strip().splitlines() or ["unknown"])[0]
