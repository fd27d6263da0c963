"""What the environment says of the machine the factory runs on: the C++ compilers to use, the
CUDA toolkits it has installed, the Debian archive it reaches. Read in one place, `read_machine`,
by the options a run settles (pipeline/options.py, whose SETTINGS list each variable) and by a
builder container for the machine it is; every step below takes these values and none reads
the environment for them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CUDA_HOME_VARIABLES", "DEBIAN_KEYRING_VARIABLE", "DEBIAN_MIRROR_VARIABLE",
           "Machine", "read_machine"]

DEBIAN_MIRROR_VARIABLE = "KERNEL_WHEEL_FACTORY_DEBIAN_MIRROR"
DEBIAN_KEYRING_VARIABLE = "KERNEL_WHEEL_FACTORY_DEBIAN_KEYRING"
CUDA_HOME_VARIABLES = ("CUDA_HOME", "CUDA_PATH")
_CROSS_PREFIX = "CXX_"  # CXX_aarch64: the cross compiler of aarch64 cells


@dataclass(frozen=True)
class Machine:
    """The machine's own words on its tools (None or empty: the factory looks for them)."""

    cxx: str | None = None  # $CXX: the host C++ compiler
    cross_cxx: tuple[tuple[str, str], ...] = ()  # $CXX_<platform>: a cross compiler
    cuda_homes: tuple[Path, ...] = ()  # $CUDA_HOME, $CUDA_PATH: installed toolkits
    debian_mirror: str | None = None  # a mirror of Debian's archive
    debian_keyring: Path | None = None  # the keyring that mirror is signed with

    def cross_compiler(self, platform: str) -> str | None:
        return dict(self.cross_cxx).get(platform)


def read_machine(environ: Mapping[str, str]) -> Machine:
    """The machine as `environ` describes it; a variable set to nothing says nothing."""
    def given(name: str) -> str | None:
        return environ.get(name, "").strip() or None

    keyring = given(DEBIAN_KEYRING_VARIABLE)
    return Machine(
        cxx=environ.get("CXX") or None,
        cross_cxx=tuple(sorted((name.removeprefix(_CROSS_PREFIX), value)
                               for name, value in environ.items()
                               if name.startswith(_CROSS_PREFIX) and value)),
        cuda_homes=tuple(Path(environ[name]) for name in CUDA_HOME_VARIABLES
                         if environ.get(name)),
        debian_mirror=given(DEBIAN_MIRROR_VARIABLE),
        debian_keyring=Path(keyring) if keyring else None)
