"""The C++ standard of a cell: the one its extensions are compiled with, the one its torch's
headers demand, and whether the host compiler gives it. Asked of the compiler itself, before
anything compiles (or a torch environment is made): g++ 10 takes -std=c++20 but sets
__cplusplus to 201709L, and torch 2.14's headers stop with "#error C++20 or later compatible
compiler is required" on anything below 202002L. That would otherwise show only as a compile
error, after the toolkit and torch were made."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import defaults
from ..errors import BuildError
from ..policy import CxxStandard, TorchRelease, cxx_standards, torch_release, torch_releases
from ..system.process import ProcessError, bounded_run, first_error
from ..values.versions import Version

__all__ = ["CompilerStandard", "compiler_shortfall", "cxx_standard", "header_standard",
           "probe_standard", "standard_shortfall"]

_DEFINE = re.compile(r'^#define (__cplusplus|__VERSION__) "?([^"\n]*?)"?L?$', re.M)


def _release(torch: Version) -> TorchRelease | None:
    """The release of a torch; for one the factory does not know (a nightly in an
    interpreter), the newest known release before it."""
    release = torch_release(torch)
    if release is None:
        older = [known for version, known in torch_releases().items() if version <= torch]
        release = max(older, key=lambda known: known.version) if older else None
    return release


def cxx_standard(torch: Version) -> str:
    """The C++ standard extensions for this torch are compiled with ("17", "20")."""
    release = _release(torch)
    return release.cxx_std if release else "17"


def header_standard(torch: Version) -> CxxStandard:
    """What this torch's headers demand of the compiler."""
    release = _release(torch)
    return cxx_standards()[release.header_std if release else "17"]


@dataclass(frozen=True)
class CompilerStandard:
    """What a compiler said when asked for a standard: the __cplusplus it sets (None: it
    refused the flag, `error` says how) and its own version string."""

    std: str
    cplusplus: int | None
    version: str = ""
    error: str = ""


def probe_standard(compiler: str, std: str,
                   argv: Callable[[Sequence[str]], tuple[list[str], Path | None]]
                   ) -> CompilerStandard:
    """Ask `compiler -std=c++NN` for its predefined macros, on the machine `argv` places the
    command on (this one, or a container)."""
    command, cwd = argv([compiler, f"-std=c++{std}", "-dM", "-E", "-x", "c++", "/dev/null"])
    try:
        done = bounded_run(command, defaults.COMPILER_PROBE_TIMEOUT, cwd=cwd)
    except ProcessError as exc:
        raise BuildError(f"the host compiler {compiler} cannot be run ({exc})") from None
    found = dict(_DEFINE.findall(done.stdout)) if done.returncode == 0 else {}
    given = found.get("__cplusplus", "")
    if not given.isdigit():
        return CompilerStandard(std, None, error=first_error(done.stderr))
    version = found.get("__VERSION__", "")  # g++: "10.2.1 20210110"; clang: "Clang 16.0.6 ..."
    version = version.split(" ")[0] if version[:1].isdigit() else version.split(" (")[0]
    return CompilerStandard(std, int(given), version)


def standard_shortfall(torch: Version, compiler: str, origin: str,
                       said: CompilerStandard) -> str | None:
    """Why this compiler cannot compile against this torch's headers, or None."""
    need = header_standard(torch)
    if said.cplusplus is not None and said.cplusplus >= need.cplusplus:
        return None
    named = f"{compiler} {said.version}".rstrip() + f" (from {origin})"
    gives = (f"sets __cplusplus to {said.cplusplus}L for -std=c++{said.std}"
             if said.cplusplus is not None else f"refuses -std=c++{said.std} ({said.error})")
    return (f"torch {torch}'s headers need C++{need.name} (__cplusplus {need.cplusplus}L: "
            f"g++ {need.gcc} or newer), and the host compiler {named} {gives}")


def compiler_shortfall(torch: Version, compiler: str, origin: str,
                       argv: Callable[[Sequence[str]], tuple[list[str], Path | None]]
                       ) -> str | None:
    """Ask `compiler` (chosen by `origin`) for the standard cells of this torch are compiled
    with, on the machine `argv` places it on: why it falls short of the headers, or None."""
    said = probe_standard(compiler, cxx_standard(torch), argv)
    return standard_shortfall(torch, compiler, origin, said)
