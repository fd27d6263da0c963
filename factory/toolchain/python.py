"""CPython interpreters for the cells built per Python version (PEP 517 projects, and every
project's free-threaded cells).

The factory's own interpreter serves its own version. Any other comes from uv: one the machine
has (uv looks on PATH and in its own managed installs), or one uv installs into the factory's
cache. A free-threaded CPython (3.14t) that neither gives is built from its source release
(factory/data/pythons.toml: a distribution archive's copy of the tarball, its sha256 checked)
with `configure --disable-gil` into the cache, once: about 3 minutes on 2 cores. A builder
container finds its interpreters where manylinux images keep them.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import sysconfig
import tarfile
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import requests

from .. import defaults
from ..errors import BuildError, Unavailable
from ..system.cache import exclusive
from ..system.process import Completed, Log, bounded_run, run
from ..system.uv import uv_bin, uv_env
from ..values.pythons import CPython

__all__ = ["MANYLINUX_PYTHONS", "PythonSource", "find_python", "manylinux_python",
           "python_sources"]

MANYLINUX_PYTHONS = Path("/opt/python")
_MARKER = ".kernel-wheel-factory-python.json"  # written last: the interpreter is complete
_TARBALL_LIMIT = 128 << 20  # bytes: a CPython source tarball is about 25 MB
_TIMEOUT = 60.0  # seconds without a byte from the archive


@dataclass(frozen=True)
class PythonSource:
    """A CPython source release the factory can build an interpreter from."""

    series: str
    version: str
    url: str
    sha256: str


def python_sources() -> dict[str, PythonSource]:
    """factory/data/pythons.toml, by series."""
    with resources.as_file(resources.files("factory.data").joinpath("pythons.toml")) as path:
        table = tomllib.loads(path.read_text())
    return {entry["series"]: PythonSource(entry["series"], entry["version"], entry["url"],
                                          entry["sha256"]) for entry in table["source"]}


def manylinux_python(python: CPython) -> Path:
    """Where a manylinux image (and the factory's Debian bases) keeps a CPython:
    /opt/python/cp312-cp312, /opt/python/cp314-cp314t for the free-threaded 3.14."""
    return MANYLINUX_PYTHONS / f"{python.interpreter_tag}-{python.abi_tag}" / "bin" / "python"


def _is_running(python: CPython) -> bool:
    """Whether the factory's own interpreter is that CPython."""
    free = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    return sys.version_info[:2] == (python.major, python.minor) and free == python.free_threaded


def find_python(python: CPython, cache: Path, log: Log, offline: bool = False) -> Path:
    """An interpreter of `python` on this machine: one it has, else one uv installs into the
    cache, or for a free-threaded one, one built from its source release into the cache (not
    when `offline`)."""
    if _is_running(python):
        return Path(sys.executable)
    wanted = f"cpython@{python}"
    env = {**uv_env(cache, offline), "UV_PYTHON_INSTALL_DIR": str(cache / "python")}
    found = _uv_python(["find", "--no-project", wanted], env)
    if found.returncode == 0:
        return Path(found.stdout.strip())
    source = python_sources().get(python.series) if python.free_threaded else None
    if source is not None:
        return _built(python, source, cache, log, offline)
    # a free-threaded interpreter that cannot be had skips its cell; any other fails it
    missing = Unavailable if python.free_threaded else BuildError
    if offline:
        raise missing(f"no {python.describe()} on this machine (offline, so uv does not "
                      "install one); install it, or leave it out of the matrix's python:")
    log.step(f"installing {python.describe()} with uv into {cache / 'python'}")
    installed = _uv_python(["install", wanted], env)
    found = _uv_python(["find", "--no-project", wanted], env)
    if installed.returncode != 0 or found.returncode != 0:
        lines = (installed.stderr or installed.stdout).strip().splitlines()
        raise missing(f"no {python.describe()} on this machine, and uv could not install one "
                      f"({lines[-1].strip() if lines else 'no output'})")
    return Path(found.stdout.strip())


def _uv_python(args: list[str], env: dict[str, str]) -> Completed[str]:
    return bounded_run([uv_bin(), "python", *args], defaults.DOWNLOAD_TIMEOUT * 10,
                       env={**os.environ, **env}, what="uv python")


def _built(python: CPython, source: PythonSource, cache: Path, log: Log,
           offline: bool) -> Path:
    """The free-threaded interpreter built from `source` in the cache, built now when it is
    not there yet."""
    prefix = cache / "python" / "source" / f"cpython-{source.version}t"
    executable = prefix / "bin" / f"python{python.series}t"
    with exclusive(prefix):
        if (prefix / _MARKER).is_file() and executable.is_file():
            return executable
        if offline:
            raise Unavailable(f"no {python.describe()} on this machine (offline, so the factory "
                             f"does not build one from {source.url}); build it once with the "
                             "network, or leave it out of the matrix's python:")
        if prefix.exists():  # an earlier build that did not finish
            shutil.rmtree(prefix)
        work = cache / "python" / "source" / f"build-{source.version}t"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        try:
            tree = _unpacked(source, work, log)
            cores = str(len(os.sched_getaffinity(0)))
            log.step(f"building {python.describe()} ({source.version}, configure --disable-gil) "
                     f"into {prefix} with {cores} core(s): a few minutes, once")
            run(["./configure", "--quiet", f"--prefix={prefix}", "--disable-gil",
                 "--with-ensurepip=no", "--disable-test-modules"], log,
                timeout=defaults.STEP_TIMEOUT, cwd=tree,
                what=f"configuring CPython {source.version}")
            run(["make", "--quiet", f"-j{cores}"], log, timeout=defaults.STEP_TIMEOUT, cwd=tree,
                what=f"compiling CPython {source.version}")
            run(["make", "--quiet", "install"], log, timeout=defaults.STEP_TIMEOUT, cwd=tree,
                what=f"installing CPython {source.version}")
            _check_modules(executable, python)
        except BaseException:
            shutil.rmtree(prefix, ignore_errors=True)
            raise
        finally:
            shutil.rmtree(work, ignore_errors=True)
        (prefix / _MARKER).write_text(f'{{"version": "{source.version}", "url": "{source.url}", '
                                      f'"sha256": "{source.sha256}"}}\n')
        return executable


def _unpacked(source: PythonSource, work: Path, log: Log) -> Path:
    """The source tree of `source`, downloaded (its size bounded, its sha256 checked) and
    unpacked under `work`."""
    tarball = work / source.url.rsplit("/", 1)[-1]
    log.step(f"downloading {source.url}")
    digest = hashlib.sha256()
    size = 0
    try:
        with requests.get(source.url, stream=True, timeout=_TIMEOUT) as response, \
                open(tarball, "wb") as handle:
            response.raise_for_status()
            for chunk in response.iter_content(1 << 20):
                size += len(chunk)
                if size > _TARBALL_LIMIT:
                    raise BuildError(f"{source.url} is larger than a CPython source release "
                                     f"({_TARBALL_LIMIT >> 20} MiB); it was not used")
                digest.update(chunk)
                handle.write(chunk)
    except requests.RequestException as exc:
        raise Unavailable(f"cannot fetch {source.url} ({type(exc).__name__}), so no "
                         f"free-threaded CPython {source.series}t can be built here") from None
    if digest.hexdigest() != source.sha256:
        raise BuildError(f"{source.url} does not have the sha256 factory/data/pythons.toml "
                         "gives it; it was not used")
    with tarfile.open(tarball) as archive:
        archive.extractall(work / "src", filter="data")  # checked above; "data" keeps it inside
    (tree,) = [path for path in (work / "src").iterdir() if path.is_dir()]
    return tree


def _check_modules(executable: Path, python: CPython) -> None:
    """The interpreter runs free-threaded and has the modules torch and uv's environments need
    (ctypes and zlib are built only where the machine has libffi's and zlib's headers)."""
    done = bounded_run([executable, "-c", "import sys, ctypes, zlib, bz2, lzma; "
                        "print(sys._is_gil_enabled())"], defaults.COMPILER_PROBE_TIMEOUT)
    if done.returncode != 0 or done.stdout.strip() != "False":
        lines = (done.stderr or done.stdout).strip().splitlines()
        raise BuildError(f"the {python.describe()} built here lacks a module torch needs "
                         f"({lines[-1] if lines else 'no output'}); install libffi-dev, "
                         "zlib1g-dev, libbz2-dev and liblzma-dev (Debian) and build again")
