"""bubblewrap (`bwrap`), which confines the code of others that the factory runs on this machine
(cells/sandbox.py): the one on the PATH, else Debian's own package, unpacked into the factory's
cache once the archive's signature vouches for it (sources/debian.py), so that a machine where
nobody installed it still runs kernel code confined. It needs the C library and libcap and
libselinux, which every Debian-based system has."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from .. import defaults
from ..errors import BuildError
from ..sources.debian import debian_archive, unpack_packages
from ..system.cache import exclusive
from ..system.machine import Machine
from ..system.process import Log

__all__ = ["provided_bwrap"]

_DEBIAN_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}


def provided_bwrap(cache: Path, log: Log, machine: Machine) -> Path:
    """Debian's bwrap in `cache`, unpacked the first time; BuildError saying why it cannot be
    had (no network, an architecture Debian's archive has no name for, no archive keys)."""
    folder = cache / "tools" / "bubblewrap"
    bwrap = folder / "usr" / "bin" / "bwrap"
    with exclusive(folder):
        if bwrap.is_file():
            return bwrap
        arch = _DEBIAN_ARCH.get(defaults.host_platform())
        if arch is None:
            raise BuildError(f"Debian's archive has no bubblewrap for {defaults.host_platform()}")
        archive = debian_archive(machine)
        log.write(f"   bubblewrap is not installed: unpacking Debian {archive.suite}'s "
                  f"({archive.url}) into {folder}")
        folder.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".bubblewrap-", dir=folder.parent,
                                         ignore_cleanup_errors=True) as scratch:
            taken = unpack_packages(archive, arch, ["bubblewrap"], Path(scratch))
            if not (Path(scratch) / "usr" / "bin" / "bwrap").is_file():
                raise BuildError(f"Debian's {', '.join(taken)} holds no usr/bin/bwrap")
            shutil.rmtree(folder, ignore_errors=True)
            Path(scratch).rename(folder)
        log.write(f"   {', '.join(taken)}: {bwrap}")
        return bwrap
