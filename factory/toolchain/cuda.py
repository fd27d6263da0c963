"""CUDA toolkits, from one of two providers: PyPI's nvidia wheels installed into the cache (CUDA
13 and newer), or a toolkit already installed on the machine (CUDA 12, or wherever the matrix
names a `home`)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..cache import exclusive
from ..errors import BuildError
from ..policy import cuda_policy
from ..process import Log, run
from ..versions import Version, major_minor, parse_release
from .uv import uv_bin, uv_env

__all__ = ["PYPI_TOOLKIT", "CudaToolkit", "nvcc_version", "provide_cuda"]

ToolkitOrigin = Literal["pypi", "installed"]

# The PyPI wheels that together make a working nvcc (same major.minor for all of them).
PYPI_TOOLKIT = ("nvidia-cuda-nvcc", "nvidia-nvvm", "nvidia-cuda-crt", "nvidia-cuda-runtime",
                "nvidia-cuda-cccl")


@dataclass(frozen=True)
class CudaToolkit:
    version: Version  # nvcc's own version, e.g. 13.0.88
    home: Path
    origin: ToolkitOrigin

    @property
    def nvcc(self) -> Path:
        return self.home / "bin" / "nvcc"

    @property
    def include(self) -> Path:
        return self.home / "include"

    @property
    def lib(self) -> Path:
        return self.home / "lib64" if (self.home / "lib64").is_dir() else self.home / "lib"


def nvcc_version(nvcc: Path) -> Version:
    try:
        output = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True,
                                check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise BuildError(f"cannot run {nvcc}: {exc}") from None
    match = re.search(r"release \d+\.\d+, V(\d+\.\d+\.\d+)", output)
    if not match:
        raise BuildError(f"cannot read the version of {nvcc}")
    return parse_release(match.group(1))


def provide_cuda(version: Version, home: Path | None, cache: Path, log: Log) -> CudaToolkit:
    """The toolkit of a CUDA version: the one installed at `home` when given, else PyPI's
    (installed into the cache) where NVIDIA publishes it there, else one found on the
    machine."""
    if home is not None:
        return _installed(home, version)
    policy = cuda_policy(version)
    if policy is not None and policy.pypi:
        return _from_pypi(major_minor(version), cache, log)
    for candidate in _installed_candidates(version):
        try:
            return _installed(candidate, version)
        except BuildError:
            continue
    mm = major_minor(version)
    raise BuildError(
        f"no CUDA {mm} toolkit on this machine: nvcc for CUDA {mm.major} is not on PyPI. Install "
        f"it (e.g. NVIDIA's cuda-minimal-build-{mm.major}-{mm.minor} package) or set "
        f"cuda.\"{mm}\".home in the matrix to its folder")


def _installed(home: Path, wanted: Version) -> CudaToolkit:
    nvcc = home / "bin" / "nvcc"
    if not nvcc.is_file():
        raise BuildError(f"no nvcc in {home}/bin")
    version = nvcc_version(nvcc)
    if major_minor(version) != major_minor(wanted):
        raise BuildError(f"{nvcc} is CUDA {version}, the matrix asks for CUDA {wanted}")
    return CudaToolkit(version, home, "installed")


def _installed_candidates(version: Version) -> list[Path]:
    mm = major_minor(version)
    candidates = [Path(os.environ[var]) for var in ("CUDA_HOME", "CUDA_PATH") if var in os.environ]
    candidates += [Path(f"/usr/local/cuda-{mm}"), Path("/usr/local/cuda")]
    on_path = shutil.which("nvcc")
    if on_path:
        candidates.append(Path(on_path).resolve().parent.parent)
    return list(dict.fromkeys(candidates))


def _from_pypi(version: Version, cache: Path, log: Log) -> CudaToolkit:
    target = cache / "cuda" / str(version)
    marker = target / "toolkit.json"
    with exclusive(target):
        if not marker.is_file():
            log.step(f"installing the CUDA {version} toolkit from PyPI into {target}")
            if target.exists():
                shutil.rmtree(target)
            pins = [f"{name}=={version}.*" for name in PYPI_TOOLKIT]
            run([uv_bin(), "pip", "install", "--quiet", "--target", target, *pins], log,
                env=uv_env(cache), what=f"installing CUDA {version} from PyPI")
            home = target / "nvidia" / f"cu{version.major}"
            _add_unversioned_links(home / "lib")
            marker.write_text(json.dumps({"home": str(home.relative_to(target))}))
        home = target / json.loads(marker.read_text())["home"]
    return CudaToolkit(nvcc_version(home / "bin" / "nvcc"), home, "pypi")


def _add_unversioned_links(lib: Path) -> None:
    """The wheels ship libcudart.so.13 but not the libcudart.so link `-lcudart` looks for."""
    for library in lib.glob("lib*.so.*"):
        plain = lib / (library.name.split(".so.")[0] + ".so")
        if not plain.exists():
            plain.symlink_to(library.name)
