"""The container engine, driven through the docker command line.

Every docker command the factory runs goes through here (builder images, build containers, the
probes of images that bring their own torch) and is a child process it keeps track of, so that
stopping a build (Ctrl-C, a failed run) can end them all and remove every container it made.
Each command but a build's own stream has a time limit. Containers carry labels naming the run
and the process that owns it; a later run removes the containers of an owner that died without
cleaning up (killed with SIGKILL, say).
"""

from __future__ import annotations

import io
import os
import re
import shutil
import signal
import socket
import subprocess
import tarfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

from .. import defaults
from ..errors import BuildError
from ..trust.credentials import without_inherited_secrets

__all__ = ["OWNER_LABEL", "RUN_LABEL", "Engine", "source_archive"]

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
OWNER_LABEL = "kernel-wheel-factory.owner"
RUN_LABEL = "kernel-wheel-factory.run"


class Engine:
    """One factory run's view of the docker daemon: a context manager that, when it exits,
    stops every docker command it started and removes every container it made."""

    def __init__(self, binary: str = "docker") -> None:
        self.binary = shutil.which(binary) or binary
        self.run_id = uuid.uuid4().hex[:12]
        self.owner = f"{socket.gethostname()}:{os.getpid()}"
        self._children: set[subprocess.Popen[bytes]] = set()
        self._containers: set[str] = set()
        self._lock = threading.Lock()
        self._steps = 0  # containers started for one step (step_container)
        self._closed = False

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()

    # -- asking -------------------------------------------------------------------------------

    def unavailable(self) -> str | None:
        """Why no daemon can be used, or None when one answers."""
        if shutil.which(self.binary) is None:
            return "the docker command is not installed"
        try:
            done = subprocess.run([self.binary, "version", "--format", "{{.Server.Version}}"],
                                  capture_output=True, text=True,
                                  env=without_inherited_secrets(),
                                  timeout=defaults.DOCKER_ANSWER_TIMEOUT)
        except subprocess.TimeoutExpired:
            return f"the docker daemon does not answer ({defaults.DOCKER_ANSWER_TIMEOUT} s)"
        if done.returncode != 0:
            lines = (done.stderr or done.stdout).strip().splitlines()
            return f"no docker daemon answers ({lines[-1] if lines else 'no output'})"
        return None

    def server_version(self) -> str:
        return self.call(["version", "--format", "{{.Server.Version}}"]).strip()

    def has_image(self, name: str) -> bool:
        return self.image_id(name) is not None

    def image_id(self, name: str) -> str | None:
        """The id of an image this daemon has, or None."""
        found = self.call(["image", "inspect", "--format", "{{.Id}}", name], check=False,
                          timeout=defaults.DOCKER_ANSWER_TIMEOUT).strip()
        return found or None

    def pull(self, name: str) -> str | None:
        """Pull an image; the reason it failed, or None."""
        try:
            self.call(["pull", "--quiet", name], timeout=defaults.DOCKER_PULL_TIMEOUT)
        except BuildError as exc:
            return str(exc)
        return None

    # -- running ------------------------------------------------------------------------------

    def call(self, args: Sequence[str], *, stdin: bytes | None = None, check: bool = True,
             what: str | None = None, timeout: float = defaults.DOCKER_CALL_TIMEOUT) -> str:
        """Run one docker command to its end; its stdout (stderr is in the error)."""
        out = self._run(args, stdin, check, what, timeout)
        return "" if out is None else out.decode(errors="replace")

    def _run(self, args: Sequence[str], stdin: bytes | None, check: bool,
             what: str | None, timeout: float) -> bytes | None:
        """Run one docker command to its end; its raw stdout, or None when it failed and
        `check` is off."""
        status, out, err = self._exchange(args, stdin, timeout, what)
        if status == 0:
            return out
        if not check:
            return None
        message = (err or out).decode(errors="replace").strip().splitlines()
        raise BuildError(f"{what or 'docker ' + args[0]} failed (exit {status}): "
                         f"{message[-1] if message else 'no output'}")

    def _exchange(self, args: Sequence[str], stdin: bytes | None, timeout: float,
                  what: str | None) -> tuple[int, bytes, bytes]:
        """Run one docker command to its end, within `timeout` seconds: (status, stdout,
        stderr). One that runs longer is killed, and that is an error."""
        process = self._start(args, stdin=subprocess.PIPE if stdin is not None else None,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            out, err = process.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # its session: whatever it started too
            process.communicate()
            raise BuildError(f"{what or 'docker ' + args[0]} did not end within "
                             f"{timeout:.0f} s") from None
        finally:
            self._forget(process)
        return process.returncode, out, err

    def probe(self, image: str, argv: Sequence[str], timeout: float) -> tuple[int, str, str]:
        """Run a command in a new container of `image` (labelled, no network, no entrypoint,
        removed when it ends or runs past `timeout` seconds): (status, stdout, stderr)."""
        container = f"kwf-{self.run_id}-probe-{uuid.uuid4().hex[:8]}"
        with self._lock:
            self._containers.add(container)
        try:
            status, out, err = self._exchange(
                ["run", "--rm", "--name", container, *self.labels(), "--network", "none",
                 "--entrypoint", "", image, *argv], None, timeout,
                f"{argv[0]} in a container of {image}")
        except BuildError:
            self._remove([container])
            raise
        finally:
            with self._lock:
                self._containers.discard(container)
        return status, out.decode(errors="replace"), err.decode(errors="replace")

    def stream(self, args: Sequence[str], on_line: Callable[[str], None],
               stdin: bytes | None = None) -> int:
        """Run a docker command, handing each line of its output (stdout and stderr merged)
        to `on_line` as it comes; its exit status."""
        process = self._start(args, stdin=subprocess.PIPE if stdin is not None else None,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert process.stdout is not None  # opened with stdout=PIPE
        try:
            if stdin is not None and process.stdin is not None:
                try:
                    process.stdin.write(stdin)
                    process.stdin.close()
                except BrokenPipeError:
                    pass
            for raw in process.stdout:
                on_line(_ANSI.sub("", raw.decode(errors="replace").rstrip("\n")))
            return process.wait()
        finally:
            self._forget(process)

    def _start(self, args: Sequence[str], **streams: Any) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._closed:
                raise BuildError("the build was stopped")
            # A new session: Ctrl-C reaches the factory, which then stops these itself.
            try:
                process = subprocess.Popen([self.binary, *args], start_new_session=True,
                                           env=without_inherited_secrets(), **streams)
            except OSError as exc:
                raise BuildError(f"docker cannot be run ({exc})") from None
            self._children.add(process)
        return process

    def _forget(self, process: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._children.discard(process)

    # -- containers ---------------------------------------------------------------------------

    def labels(self) -> list[str]:
        return ["--label", f"{OWNER_LABEL}={self.owner}", "--label", f"{RUN_LABEL}={self.run_id}"]

    def launch(self, image: str, name: str, options: Iterable[str]) -> str:
        """Start a container that idles until the factory removes it; its name."""
        container = f"kwf-{self.run_id}-{name}"
        with self._lock:
            self._containers.add(container)
        self.call(["run", "--detach", "--name", container, *self.labels(), "--init", *options,
                   image, "sleep", "infinity"], what=f"starting container {container}")
        return container

    def exec_prefix(self, container: str, user: str) -> tuple[str, ...]:
        """What runs a command in one of this run's containers as `user`: for the compilers
        the compile pool starts, times and stops itself (their container goes with close())."""
        return (self.binary, "exec", "--user", user, container)

    def copy_in(self, container: str, folder: str, archive: bytes) -> None:
        """Unpack a tar archive into a folder of the container."""
        self.call(["cp", "-", f"{container}:{folder}"], stdin=archive,
                  what=f"copying into {container}")

    def copy_out(self, container: str, path: str) -> tarfile.TarFile:
        """One file or folder of the container, as a tar archive."""
        data = self._run(["cp", f"{container}:{path}", "-"], None, True, f"copying {path} out",
                         defaults.DOCKER_CALL_TIMEOUT)
        assert data is not None  # with check on, a failed copy raises
        return tarfile.open(fileobj=io.BytesIO(data))

    @contextmanager
    def step_container(self, image: str, name: str, options: Iterable[str]) -> Iterator[str]:
        """A container for one step, named `name-N` (N counts this run's steps), removed with
        everything the step started in it when the step ends."""
        with self._lock:
            self._steps += 1
            number = self._steps
        container = self.launch(image, f"{name}-{number}", options)
        try:
            yield container
        finally:
            self.remove(container)

    def remove(self, container: str) -> None:
        """Remove one of this run's containers now, with whatever still runs in it."""
        with self._lock:
            self._containers.discard(container)
        self._remove([container])

    def close(self) -> None:
        """Remove this run's containers (which ends what runs in them) and stop every docker
        command still running; idempotent."""
        with self._lock:
            self._closed = True
            children = list(self._children)
            containers = sorted(self._containers)
            self._containers.clear()
        self._remove(containers)
        for process in children:
            if process.poll() is None:
                process.terminate()
        deadline = time.monotonic() + defaults.DOCKER_STOP_TIMEOUT  # for all of them together
        for process in children:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def remove_orphans(self) -> list[str]:
        """Remove containers left by factory processes of this machine that no longer run."""
        listing = self.call(["ps", "--all", "--filter", f"label={OWNER_LABEL}", "--format",
                             f'{{{{.Names}}}} {{{{.Label "{OWNER_LABEL}"}}}}'], check=False)
        host = socket.gethostname()
        orphans = []
        for line in listing.splitlines():
            name, _, owner = line.partition(" ")
            owner_host, _, pid = owner.rpartition(":")
            if owner_host == host and pid.isdigit() and not _alive(int(pid)):
                orphans.append(name)
        self._remove(orphans)
        return orphans

    def _remove(self, containers: list[str]) -> None:
        """Remove containers, running or not (outside _start: it works after close())."""
        if not containers:
            return
        try:
            subprocess.run([self.binary, "rm", "--force", "--volumes", *containers],
                           capture_output=True, check=False, env=without_inherited_secrets(),
                           timeout=defaults.DOCKER_STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            pass  # the daemon is stuck; a later run removes them as orphans


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        pass
    return True


def source_archive(root: Path, files: Iterable[Path], prefix: str) -> bytes:
    """A tar archive of a kernel's files under `prefix/`, owned by root and writable by no one
    else: the container's build user can read the copy but not change it."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        files = list(files)
        folders = {parent for relative in files for parent in relative.parents}
        for folder in sorted(folders, key=lambda path: len(path.parts)):
            entry = tarfile.TarInfo(f"{prefix}/{folder.as_posix()}".rstrip("/.") or prefix)
            entry.type, entry.mode = tarfile.DIRTYPE, 0o755
            archive.addfile(entry)
        for relative in files:
            info = archive.gettarinfo(str(root / relative), f"{prefix}/{relative.as_posix()}")
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mode &= 0o755
            if info.isreg():
                with open(root / relative, "rb") as handle:
                    archive.addfile(info, handle)
            else:
                archive.addfile(info)
    return buffer.getvalue()
