"""A PEP 517 project's build on this machine, confined: its setup.py is the project's own code,
run with the factory's rights unless something holds it.

The build runs under bubblewrap (`bwrap`, Debian's and Fedora's `bubblewrap`): the whole file
system read-only but for the cell's build folder (its TMPDIR is a folder of it), no network,
its own process and IPC namespaces, and ended with the factory. Its environment is an
allow-list (locale, PATH, the compilers' search paths) plus what the factory sets for the build
and the matrix's `env:` for the kernel: none of the factory's own variables (TWINE_PASSWORD,
HF_TOKEN, AWS_*, GITHUB_TOKEN) reach it, and HOME and TMPDIR are folders of the build folder.

A cell's import gate and its kernel's tests (the kernel's own code, as much as a setup.py is)
run the same way (Confined), with the GPU's device files bound in. Where the PATH has no bwrap,
Debian's package is unpacked into the factory's cache (toolchain/bubblewrap.py); bwrap is
started through system/enter_sandbox.py, which starts it again where its set-up failed before
the command ran. Without a working bwrap, kernel code is refused with one line, unless the user
opts in to running it unconfined (`--unconfined`); the docker runner confines it itself.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from .. import defaults
from ..errors import BuildError
from ..system.machine import Machine
from ..system.process import Log, ProcessError, bounded_run, foreign_environment
from ..toolchain import CommandPrefix
from ..toolchain.bubblewrap import provided_bwrap
from ..trust.keys import KEY_FILE

__all__ = ["KERNEL_CODE", "Confined", "confined_command", "confined_environment", "gpu_devices",
           "hidden_secrets", "provide_bwrap"]
_REFUSED = ("{what}; on this machine the factory runs it only "
            "confined by bubblewrap (bwrap), which {why}: install bubblewrap (apt install "
            "bubblewrap), build with --runner docker, or pass --unconfined to run it with your "
            "rights, your files and your network")
_BUILD = "a setup.py / pyproject project's build runs its own code"
KERNEL_CODE = "a kernel's import gate and tests run the kernel's own code"
# bwrap is started through this program, which starts it again where its set-up lost a race
# with the machine's mounts before the command ran (system/enter_sandbox.py says how)
_ENTER = str(resources.files("factory.system").joinpath("enter_sandbox.py"))


def confined_environment(work: Path, variables: Mapping[str, str],
                         environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The build's environment: the allow-listed variables of `environ` (the factory's own),
    a HOME and TMPDIR inside the build folder, and `variables` (the factory's settings for the
    build and the matrix's env:) over them."""
    return {**foreign_environment(work, environ), **variables}


@dataclass(frozen=True)
class Confined(CommandPrefix):
    """Commands run by bubblewrap, writing only under `work`: a cell's import gate and its
    kernel's tests (on the GPU, whose `devices` are bound in, or by an emulated CPython)."""

    work: Path = Path("/nonexistent")
    what: str = _BUILD
    devices: tuple[str, ...] = ()

    def argv(self, argv: Sequence[str], cwd: Path) -> tuple[list[str], Path | None]:
        return confined_command(argv, self.work, cwd, self.what, self.devices), None


def confined_command(argv: Sequence[str], work: Path, cwd: Path, what: str = _BUILD,
                     devices: Sequence[str] = ()) -> list[str]:
    """`argv` run by bubblewrap: everything read-only but `work`, no network, private /dev
    (with `devices` bound in) and /proc, its own process namespace, so that no other
    process's /proc/PID/environ is there to read, ended when the factory ends. `what` runs
    there, as the refusal says when bwrap cannot run."""
    bwrap = _working_bwrap(what)
    # /tmp stays as it is, read-only (the factory, its environments or the build folder may
    # live there); TMPDIR points into the build folder
    bound = [part for device in devices for part in ("--dev-bind", device, device)]
    return [*_entering(bwrap), "--ro-bind", "/", "/", "--dev", "/dev", *bound, "--proc", "/proc",
            *hidden_secrets(), "--bind", str(work), str(work), "--chdir", str(cwd),
            "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--die-with-parent", "--", *argv]


def _entering(bwrap: str) -> list[str]:
    """The start of a command line that runs `bwrap` with the options after it."""
    return [sys.executable, "-I", "-S", _ENTER, bwrap]


# Where a user keeps what a build must not read (and could copy into the wheel it makes): the
# object cache's key, and the usual homes of cloud, registry, SSH and Git credentials.
_SECRET_FOLDERS = (".aws", ".ssh", ".gnupg", ".docker", ".kube", ".azure", ".huggingface")
_SECRET_CONFIG_FOLDERS = ("gh", "gcloud", "hub")
_SECRET_FILES = (".netrc", ".pypirc", ".git-credentials", ".cache/huggingface/token",
                 ".config/git/credentials")


def hidden_secrets(environ: Mapping[str, str] | None = None) -> list[str]:
    """bwrap's options that put an empty folder over each folder of secrets this user has
    (the factory's configuration folder, which holds the object cache's key, ~/.aws, ~/.ssh,
    ...) and /dev/null, which cannot be read there, over each file of them (~/.netrc,
    ~/.pypirc, ...), where a link leads (a ~/.ssh that is a link hides what it names): the
    file system is read-only inside, but a build could read them and copy them into its
    wheel."""
    environ = os.environ if environ is None else environ
    home = Path(environ.get("HOME") or Path.home())
    config = Path(environ.get("XDG_CONFIG_HOME") or home / ".config")
    folders = [config / KEY_FILE.parent, *(home / name for name in _SECRET_FOLDERS),
               *(config / name for name in _SECRET_CONFIG_FOLDERS)]
    options = [part for folder in folders if folder.is_dir()
               for part in ("--tmpfs", str(folder.resolve()))]
    return options + [part for file in (home / name for name in _SECRET_FILES)
                      if file.is_file()
                      for part in ("--ro-bind", "/dev/null", str(file.resolve()))]


def gpu_devices(dev: Path = Path("/dev")) -> tuple[str, ...]:
    """The device files CUDA opens (/dev/nvidiactl, /dev/nvidia0, /dev/nvidia-uvm, the
    nvidia-caps folder, ...): what a confined process on this machine's GPUs needs of /dev."""
    return tuple(sorted(str(path) for path in dev.glob("nvidia*")))


# bwrap unpacked from Debian's archive into the cache (provide_bwrap), where the PATH has none;
# or why it could not be had
_PROVIDED: dict[str, str] = {}


def provide_bwrap(cache: Path, log: Log, machine: Machine) -> None:
    """Make sure there is a bwrap to confine with: the PATH's, else Debian's, unpacked into
    `cache` (toolchain/bubblewrap.py); when neither can be had, the refusal says why."""
    if _PROVIDED or shutil.which("bwrap"):
        return
    try:
        _PROVIDED["bwrap"] = str(provided_bwrap(cache, log, machine))
    except BuildError as exc:
        _PROVIDED["why"] = f"is not installed, and Debian's could not be had ({exc})"
    _bwrap.cache_clear()


def _working_bwrap(what: str) -> str:
    """bwrap's path, once it has run a command here; BuildError saying what to do otherwise."""
    found, why = _bwrap()
    if found is None:
        raise BuildError(_REFUSED.format(what=what, why=why))
    return found


@functools.lru_cache(maxsize=1)
def _bwrap() -> tuple[str | None, str]:
    """bwrap's path once it has run a command here, else None and why it cannot."""
    found = shutil.which("bwrap") or _PROVIDED.get("bwrap")
    if found is None:
        return None, _PROVIDED.get("why", "is not installed")
    try:
        done = bounded_run([*_entering(found), "--ro-bind", "/", "/", "--unshare-net", "--",
                            "true"],
                           defaults.COMPILER_PROBE_TIMEOUT)
    except ProcessError as exc:
        return None, f"cannot run here ({exc})"
    if done.returncode != 0:
        said = next((line for line in done.stderr.splitlines() if line.strip()), "no output")
        return None, f"cannot run here ({said})"
    return found, ""
