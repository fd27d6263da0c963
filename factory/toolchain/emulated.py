"""Torch environments of another platform: aarch64 cells cross-compiled on an x86_64 machine.

Such an environment is a small aarch64 root folder: Debian's arm64 CPython and the libraries it
and torch load (glibc, libstdc++, zlib, ...), unpacked from Debian's archive, with the cell's
aarch64 torch (and its nvidia-* wheels) installed by uv into that CPython's dist-packages
folder. The build reads torch's headers, link libraries and CUDA runtime there; the gates run
that CPython under qemu's user-mode emulation (`bin/python`, a script that starts it with the
root folder as qemu's sysroot), so the wheel is imported and its CPU ops run with the torch it
was built against. No GPU code runs: the SASS gate checks the GPU code, and running it on an
aarch64 GPU is left to a machine that has one.

Debian's packages are found in its archive's index of the suite (the version current there),
each checked back to the suite's signature before it is unpacked (sources/debian.py); the
versions taken are kept in the environment's marker and said in the log.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from .. import defaults
from ..errors import BuildError
from ..sources.debian import Archive, debian_archive, unpack_packages
from ..sources.installed import ProbeError, probe_interpreter
from ..system.cache import exclusive
from ..system.machine import Machine
from ..system.process import Log, run
from ..system.uv import uv_bin, uv_env
from ..values.versions import Version, compact, major_minor
from . import HostCompiler
from .torch import (
    TorchEnv,
    check_cuda,
    find_links,
    torch_constraints,
    torch_requirement,
    viewing,
)

__all__ = ["EMULATED_PYTHON", "Emulation", "cross_compiler", "emulated_env_beside", "emulation",
           "install_emulated", "provide_emulated_torch", "wheel_platform_args"]

_MARKER = "factory-emulated-env.v1.json"
EMULATED_PYTHON = "3.11"  # bookworm's CPython, which the environment's torch is installed for
# What Debian's CPython needs to start and import torch (its other extension modules' libraries,
# readline's or sqlite's, are left out: torch loads none of them), and the headers of its C API.
PACKAGES = ("libc6", "libgcc-s1", "libstdc++6", "zlib1g", "libexpat1", "libffi8", "libbz2-1.0",
            "liblzma5", "libcrypt1", "libuuid1", "python3.11-minimal", "libpython3.11-minimal",
            "libpython3.11-stdlib", "libpython3.11-dev")


@dataclass(frozen=True)
class Emulation:
    """How this machine runs and builds for one foreign platform."""

    platform: str  # aarch64
    debian_arch: str  # arm64
    qemu: str  # the user-mode emulator's command, e.g. qemu-aarch64-static
    compiler: str  # the cross C++ compiler, e.g. aarch64-linux-gnu-g++
    wheel_platform: str  # uv's --python-platform: the emulated glibc (Debian 12: 2.36)


_EMULATIONS = {
    "aarch64": (("qemu-aarch64-static", "qemu-aarch64"), "aarch64-linux-gnu-g++", "arm64",
                "aarch64-manylinux_2_36"),
}


def emulation(platform: str, given: str | None = None) -> Emulation:
    """The cross compiler (`given`: the one the machine names, its $CXX_<platform>) and the
    emulator for `platform` on this machine, or one line saying what to install."""
    if platform not in _EMULATIONS:
        raise BuildError(f"the factory cannot cross-build {platform} cells")
    emulators, compiler, debian_arch, wheel_platform = _EMULATIONS[platform]
    qemu = next((found for name in emulators if (found := shutil.which(name))), None)
    cxx = given or shutil.which(compiler)
    missing = [package for package, found in (("g++-aarch64-linux-gnu", cxx),
                                              ("qemu-user-static", qemu)) if not found]
    if missing:
        raise BuildError(f"cross-building {platform} cells needs {' and '.join(missing)} "
                         f"(Debian and Ubuntu: apt-get install {' '.join(missing)})")
    assert qemu is not None and cxx is not None
    return Emulation(platform, debian_arch, qemu, cxx, wheel_platform)


def cross_compiler(platform: str, machine: Machine) -> HostCompiler:
    """The C++ compiler of a cross-compiled cell: the one the machine names
    ($CXX_<platform>), else the cross g++."""
    given = machine.cross_compiler(platform)
    target = emulation(platform, given)
    variable = f"CXX_{platform}"
    return HostCompiler(target.compiler, f"${variable}" if given else
                        f"the PATH, the {platform} cross compiler (${variable} unset)")


def wheel_platform_args(platform: str) -> list[str]:
    """uv's options that install wheels for the emulated CPython of `platform`, not for this
    machine."""
    return ["--python-platform", _EMULATIONS[platform][3], "--python-version", EMULATED_PYTHON]


def provide_emulated_torch(torch: Version, cuda: Version, torch_index: str | None, cache: Path,
                           log: Log, target: Emulation, machine: Machine, create: bool = True,
                           offline: bool = False) -> TorchEnv:
    """The cached aarch64 environment of torch `torch` built for CUDA `cuda` (from
    `torch_index`, else PyPI), made on first use."""
    index = hashlib.sha256((torch_index or "pypi").encode()).hexdigest()[:8]
    root = cache / "envs" / (f"torch{torch}-cu{compact(major_minor(cuda))}-{target.platform}-"
                             f"py{EMULATED_PYTHON}-{index}")
    marker = root / _MARKER
    with exclusive(root):
        if not marker.is_file():
            if not create:
                raise BuildError(f"the {target.platform} environment for "
                                 f"{torch_requirement(torch)} was not prepared ({root} is "
                                 "missing)")
            if offline:
                raise BuildError(f"the {target.platform} environment for "
                                 f"{torch_requirement(torch)} is not in the cache, and --offline "
                                 "does not fetch it")
            _create(root, torch, torch_index, cache, log, target, debian_archive(machine))
        info = json.loads(marker.read_text())
    _write_launcher(root, target)  # the emulator's path is this machine's, not the cache's
    try:
        found = probe_interpreter(root / "bin" / "python", require_cuda=False)
    except ProbeError as exc:
        raise BuildError(f"the {target.platform} environment in {root}: {exc}") from None
    site = Path(found.site_packages)
    env = TorchEnv(
        root=root, python=root / "bin" / "python", site_packages=site,
        torch_version=found.version, torch_cuda=found.cuda_release,
        cxx11_abi=found.cxx11_abi, python_include=Path(found.python_include),
        cuda_library_includes=tuple(Path(path) for path in found.library_includes),
        definitions=found.definitions, platform=target.platform,
        emulated=tuple(info["packages"]))
    check_cuda(env, cuda)
    return env


def _create(root: Path, torch: Version, torch_index: str | None, cache: Path, log: Log,
            target: Emulation, archive: Archive) -> None:
    requirement = torch_requirement(torch)
    log.step(f"making the {target.platform} environment for {requirement} "
             f"({torch_index or 'PyPI'}) in {root}: Debian {archive.suite}'s "
             f"{target.debian_arch} CPython {EMULATED_PYTHON}, run by {target.qemu}")
    if root.exists():
        shutil.rmtree(root)
    sysroot = root / "sysroot"
    sysroot.mkdir(parents=True)
    taken = unpack_packages(archive, target.debian_arch, PACKAGES, sysroot)
    log.write(f"   Debian {archive.suite} {target.debian_arch} ({archive.url}, InRelease signed by "
              f"a key of {archive.keyring}): {', '.join(taken)}")
    site = sysroot / "usr" / "lib" / "python3" / "dist-packages"
    try:
        site.mkdir(parents=True, exist_ok=True)
        inside = site.resolve(strict=True).is_relative_to(sysroot.resolve())
    except OSError as exc:  # a package's links that loop
        raise BuildError(f"{site} cannot be made in Debian's root folder ({exc.strerror})") \
            from None
    if not inside:  # unpacking kept every link inside the root; checked all the same
        raise BuildError(f"{site} leads outside {sysroot}; nothing is installed there")
    index = ["--index", torch_index] if torch_index else []
    run([uv_bin(), "pip", "install", "--quiet", "--target", site,
         *wheel_platform_args(target.platform),
         *index, requirement], log, timeout=defaults.STEP_TIMEOUT, env=uv_env(cache, False),
        what=f"installing {target.platform} {requirement}")
    (root / _MARKER).write_text(json.dumps({"packages": taken}, indent=1))


def emulated_env_beside(root: Path, torch: TorchEnv, requires: list[str], cache: Path,
                        log: Log, offline: bool, what: str,
                        wheelhouses: tuple[Path, ...] = ()) -> Path:
    """What env_beside_torch makes for an emulated torch: at `root` (made afresh), a site
    folder holding `requires` as wheels only (bounded by torch's own requirements; what is
    installed beside torch counts as installed), wheels for the emulated CPython (from the
    index, uv's cache or `wheelhouses`), and bin/python, which runs that CPython with the folder
    on its path (its own dist-packages hold torch). The site folder."""
    assert torch.platform is not None
    if root.exists():
        shutil.rmtree(root)
    site = root / "site"
    site.mkdir(parents=True)
    constraints = torch_constraints(root, torch, pinned=True)
    if requires:
        with viewing(site, torch.site_packages):
            run([uv_bin(), "pip", "install", "--quiet", "--no-build", "--target", site,
                 "--constraint", constraints, *wheel_platform_args(torch.platform),
                 *find_links(wheelhouses), *requires], log,
                timeout=defaults.STEP_TIMEOUT, env=uv_env(cache, offline), what=what)
    launcher = root / "bin" / "python"
    launcher.parent.mkdir()
    path = f"{shlex.quote(str(site))}${{PYTHONPATH:+:$PYTHONPATH}}"
    launcher.write_text(f"#!/bin/sh\nPYTHONPATH={path} exec {shlex.quote(str(torch.python))} "
                        "\"$@\"\n")
    launcher.chmod(0o755)
    return site


def install_emulated(wheel: Path, site: Path, torch: TorchEnv, cache: Path, log: Log,
                     offline: bool) -> None:
    """Install `wheel` alone into the site folder of an emulated environment."""
    assert torch.platform is not None
    run([uv_bin(), "pip", "install", "--quiet", "--no-deps", "--target", site,
         *wheel_platform_args(torch.platform), wheel], log,
        timeout=defaults.STEP_TIMEOUT,
        env=uv_env(cache, offline), what=f"installing {wheel.name}")


def _write_launcher(root: Path, target: Emulation) -> None:
    """bin/python: the emulated CPython, with the root folder as qemu's sysroot (the absolute
    paths the loader and CPython open are looked up there first)."""
    sysroot = root / "sysroot"
    text = (f"#!/bin/sh\nexec {shlex.quote(target.qemu)} -L {shlex.quote(str(sysroot))} "
            f"{shlex.quote(str(sysroot / 'usr' / 'bin' / f'python{EMULATED_PYTHON}'))} \"$@\"\n")
    launcher = root / "bin" / "python"
    if launcher.is_file() and launcher.read_text() == text:
        return
    launcher.parent.mkdir(exist_ok=True)
    partial = launcher.with_name("python.partial")
    partial.write_text(text)
    partial.chmod(partial.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    partial.replace(launcher)
