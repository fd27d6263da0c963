"""A PEP 517 project's build on this machine, confined: its setup.py is the project's own code,
run with the factory's rights unless something holds it.

The build runs under bubblewrap (`bwrap`, Debian's and Fedora's `bubblewrap`): the whole file
system read-only but for the cell's build folder (its TMPDIR is a folder of it), no network,
its own process and IPC namespaces, and ended with the factory. Its environment is an
allow-list (locale, PATH, the compilers' search paths) plus what the factory sets for the build
and the matrix's `env:` for the kernel: none of the factory's own variables (TWINE_PASSWORD,
HF_TOKEN, AWS_*, GITHUB_TOKEN) reach it, and HOME and TMPDIR are folders of the build folder.

Without a working bwrap the build is refused with one line, unless the user opts in to an
unconfined build (`--unconfined`); the docker runner confines builds itself.
"""

from __future__ import annotations

import functools
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import defaults
from ..errors import BuildError
from ..system.process import ProcessError, bounded_run, foreign_environment
from ..toolchain import CommandPrefix

__all__ = ["Confined", "confined_command", "confined_environment"]
_REFUSED = ("{what}; on this machine the factory runs it only "
            "confined by bubblewrap (bwrap), which {why}: install bubblewrap (apt install "
            "bubblewrap), build with --runner docker, or pass --unconfined to run it with your "
            "rights, your files and your network")
_BUILD = "a setup.py / pyproject project's build runs its own code"


def confined_environment(work: Path, variables: Mapping[str, str],
                         environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The build's environment: the allow-listed variables of `environ` (the factory's own),
    a HOME and TMPDIR inside the build folder, and `variables` (the factory's settings for the
    build and the matrix's env:) over them."""
    return {**foreign_environment(work, environ), **variables}


@dataclass(frozen=True)
class Confined(CommandPrefix):
    """Commands run by bubblewrap, writing only under `work` (a cross-compiled cell's gates:
    the emulated CPython imports the wheel and runs the kernel's tests on this machine)."""

    work: Path = Path("/nonexistent")
    what: str = _BUILD

    def argv(self, argv: Sequence[str], cwd: Path) -> tuple[list[str], Path | None]:
        return confined_command(argv, self.work, cwd, self.what), None


def confined_command(argv: Sequence[str], work: Path, cwd: Path,
                     what: str = _BUILD) -> list[str]:
    """`argv` run by bubblewrap: everything read-only but `work`, no network, private /dev
    and /proc, its own process namespace, ended when the factory ends. `what` runs there, as
    the refusal says when bwrap cannot run."""
    bwrap = _working_bwrap(what)
    # /tmp stays as it is, read-only (the factory, its environments or the build folder may
    # live there); TMPDIR points into the build folder
    return [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--bind", str(work), str(work), "--chdir", str(cwd),
            "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--die-with-parent", "--", *argv]


def _working_bwrap(what: str) -> str:
    """bwrap's path, once it has run a command here; BuildError saying what to do otherwise."""
    found, why = _bwrap()
    if found is None:
        raise BuildError(_REFUSED.format(what=what, why=why))
    return found


@functools.lru_cache(maxsize=1)
def _bwrap() -> tuple[str | None, str]:
    """bwrap's path once it has run a command here, else None and why it cannot."""
    found = shutil.which("bwrap")
    if found is None:
        return None, "is not installed"
    try:
        done = bounded_run([found, "--ro-bind", "/", "/", "--unshare-net", "--", "true"],
                           defaults.COMPILER_PROBE_TIMEOUT)
    except ProcessError as exc:
        return None, f"cannot run here ({exc})"
    if done.returncode != 0:
        said = next((line for line in done.stderr.splitlines() if line.strip()), "no output")
        return None, f"cannot run here ({said})"
    return found, ""
