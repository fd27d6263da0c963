"""CUDA toolkits. A cell's toolkit is, in this order: the one its matrix entry names (`home`);
one already installed on the machine (CUDA_HOME, CUDA_PATH, nvcc on PATH, /usr/local/cuda-X.Y,
/usr/local/cuda, Debian's /usr/lib/cuda) whose nvcc is the cell's CUDA version; else PyPI's
nvidia wheels installed into the cache, where NVIDIA publishes them (CUDA 13 and newer). A
toolkit already there is never downloaded again; an image's own toolkit is read by its probe
(sources/installed.py)."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .. import defaults
from ..config.torches import InstalledTorch
from ..errors import BuildError
from ..policy import cuda_policy
from ..system.cache import exclusive
from ..system.process import Log, ProcessError, bounded_run
from ..system.uv import install_into
from ..values.versions import Version, major_minor, parse_release

__all__ = ["PYPI_TOOLKIT", "CudaToolkit", "image_toolkit", "locate_cuda", "nvcc_seeds",
           "nvcc_version", "provide_cuda"]

ToolkitOrigin = Literal["pypi", "installed", "image"]

# The PyPI wheels that together make a working nvcc (same major.minor for all of them).
PYPI_TOOLKIT = ("nvidia-cuda-nvcc", "nvidia-nvvm", "nvidia-cuda-crt", "nvidia-cuda-runtime",
                "nvidia-cuda-cccl")
# Where toolkits keep libcudart, below their folder (Debian's toolkit lives in /usr itself).
_RUNTIME_FOLDERS = ("lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib",
                    "lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu")
SYSTEM_INCLUDE = Path("/usr/include")


@dataclass(frozen=True)
class CudaToolkit:
    version: Version  # nvcc's own version, e.g. 13.0.88
    home: Path
    origin: ToolkitOrigin
    lib: Path  # the folder holding libcudart
    system_include: bool = False  # its headers are the system's own (/usr/include, Debian's)
    # Whether nvcc takes --frandom-seed: without it, cudafe names the unnamed namespaces of a
    # file (libcu++'s `ignore`, say) after its own process id, so no two runs give one object.
    seeds: bool = False

    @property
    def nvcc(self) -> Path:
        return self.home / "bin" / "nvcc"

    @property
    def include(self) -> Path:
        return self.home / "include"

    def describe(self) -> str:
        return f"nvcc {self.version} ({self.origin}, {self.home})"


def nvcc_version(nvcc: Path) -> Version:
    try:
        done = bounded_run([nvcc, "--version"], defaults.COMPILER_PROBE_TIMEOUT)
    except ProcessError as exc:
        raise BuildError(f"cannot run {nvcc}: {exc}") from None
    if done.returncode != 0:
        raise BuildError(f"cannot run {nvcc}: exit {done.returncode}")
    output = done.stdout
    match = re.search(r"release \d+\.\d+, V(\d+\.\d+\.\d+)", output)
    if not match:
        raise BuildError(f"cannot read the version of {nvcc}")
    return parse_release(match.group(1))


def nvcc_seeds(nvcc: Path) -> bool:
    """Whether this nvcc lists --frandom-seed among its options."""
    try:
        return "--frandom-seed" in bounded_run([nvcc, "--help"],
                                               defaults.COMPILER_PROBE_TIMEOUT).stdout
    except ProcessError:
        return False


def provide_cuda(version: Version, home: Path | None, cache: Path, log: Log,
                 offline: bool = False, homes: tuple[Path, ...] = ()) -> CudaToolkit:
    """The toolkit of a CUDA version (see the module's text for the order; `homes`: the
    toolkits the machine names, its $CUDA_HOME and $CUDA_PATH); PyPI's is installed into the
    cache on first use (`offline`: from uv's cache only)."""
    found = locate_cuda(version, home, homes)
    if found is not None:
        return found
    mm = major_minor(version)
    policy = cuda_policy(version)
    if policy is not None and policy.pypi:
        return _from_pypi(mm, cache, log, offline)
    raise BuildError(
        f"no CUDA {mm} toolkit on this machine: nvcc for CUDA {mm.major} is not on PyPI. Install "
        f"it (e.g. NVIDIA's cuda-minimal-build-{mm.major}-{mm.minor} package) and set CUDA_HOME, "
        f"or set cuda.\"{mm}\".home in the matrix to its folder")


def locate_cuda(version: Version, home: Path | None,
                homes: tuple[Path, ...] = ()) -> CudaToolkit | None:
    """The toolkit of this CUDA version already on the machine: the one at `home` (which must
    be that version), else the first installed one of that version (those the machine names in
    `homes` first); None when there is none."""
    if home is not None:
        return _installed(home, version)
    for candidate in _installed_candidates(version, homes):
        try:
            return _installed(candidate, version)
        except BuildError:
            continue
    return None


def image_toolkit(installed: InstalledTorch) -> CudaToolkit:
    """The toolkit inside an image, as its probe found it."""
    assert installed.toolkit_home and installed.toolkit_version and installed.toolkit_lib
    home = Path(installed.toolkit_home)  # the probe gives it with links resolved
    return CudaToolkit(parse_release(installed.toolkit_version), home, "image",
                       Path(installed.toolkit_lib), home / "include" == SYSTEM_INCLUDE,
                       installed.toolkit_seeds)


def _installed(home: Path, wanted: Version) -> CudaToolkit:
    nvcc = home / "bin" / "nvcc"
    if not nvcc.is_file():
        raise BuildError(f"no nvcc in {home}/bin")
    version = nvcc_version(nvcc)
    if major_minor(version) != major_minor(wanted):
        raise BuildError(f"{nvcc} is CUDA {version}, the matrix asks for CUDA {wanted}")
    return CudaToolkit(version, home, "installed", _runtime_folder(home),
                       (home / "include").resolve() == SYSTEM_INCLUDE, nvcc_seeds(nvcc))


def _runtime_folder(home: Path) -> Path:
    for name in _RUNTIME_FOLDERS:
        if any((home / name).glob("libcudart.so*")):
            return home / name
    raise BuildError(f"the CUDA toolkit at {home} has no libcudart.so (looked in "
                     f"{', '.join(_RUNTIME_FOLDERS)})")


def _installed_candidates(version: Version, homes: tuple[Path, ...]) -> list[Path]:
    mm = major_minor(version)
    candidates = list(homes)
    on_path = shutil.which("nvcc")
    if on_path:
        candidates.append(Path(on_path).resolve().parent.parent)
    candidates += [Path(f"/usr/local/cuda-{mm}"), Path("/usr/local/cuda"), Path("/usr/lib/cuda")]
    return list(dict.fromkeys(candidates))


def _from_pypi(version: Version, cache: Path, log: Log, offline: bool) -> CudaToolkit:
    target = cache / "cuda" / str(version)
    marker = target / "toolkit.json"
    with exclusive(target):
        if not marker.is_file():
            install_into(target, [f"{name}=={version}.*" for name in PYPI_TOOLKIT], cache, log,
                         offline, f"installing the CUDA {version} toolkit from PyPI",
                         f"installing CUDA {version} from PyPI")
            home = target / "nvidia" / f"cu{version.major}"
            _add_unversioned_links(home / "lib")
            marker.write_text(json.dumps({"home": str(home.relative_to(target))}))
        home = target / json.loads(marker.read_text())["home"]
    nvcc = home / "bin" / "nvcc"
    return CudaToolkit(nvcc_version(nvcc), home, "pypi", home / "lib", seeds=nvcc_seeds(nvcc))


def _add_unversioned_links(lib: Path) -> None:
    """The wheels ship libcudart.so.13 but not the libcudart.so link `-lcudart` looks for."""
    for library in lib.glob("lib*.so.*"):
        plain = lib / (library.name.split(".so.")[0] + ".so")
        if not plain.exists():
            plain.symlink_to(library.name)
