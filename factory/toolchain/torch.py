"""Torch environments: one virtual environment per torch version and CUDA flavour, made with uv
and kept in the cache. Extensions compile against the headers and libraries inside it.

Whatever provides a torch (this uv provider today), the build sees a TorchEnv: where torch's
headers and libraries are, its exact version, its CUDA version and C++ ABI."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ..cache import exclusive
from ..errors import BuildError
from ..process import Log, run
from ..versions import Version, compact, major_minor, parse_release
from .uv import uv_bin, uv_env

__all__ = ["TorchEnv", "env_key", "provide_torch", "torch_requirement"]

_MARKER = "factory-env.json"


@dataclass(frozen=True)
class TorchEnv:
    root: Path
    python: Path
    site_packages: Path
    torch_version: str  # as installed, e.g. "2.11.0+cu130"
    torch_cuda: Version | None  # the CUDA version torch was built with (None: CPU build)
    cxx11_abi: bool
    python_include: Path

    @property
    def torch_dir(self) -> Path:
        return self.site_packages / "torch"

    @property
    def include_dirs(self) -> list[Path]:
        return [self.torch_dir / "include", self.torch_dir / "include/torch/csrc/api/include"]

    @property
    def lib_dir(self) -> Path:
        return self.torch_dir / "lib"

    @property
    def cuda_library_includes(self) -> list[Path]:
        """Headers of the CUDA libraries torch's own headers include (cuBLAS, cuSPARSE, ...),
        installed with torch as nvidia-* wheels."""
        nvidia = self.site_packages / "nvidia"
        return sorted(path for path in nvidia.glob("*/include") if path.is_dir())


def torch_requirement(torch: Version) -> str:
    return f"torch=={torch}.*" if len(torch.release) == 2 else f"torch=={torch}"


def env_key(torch: Version, cuda: Version, torch_index: str | None, python: str) -> str:
    index = hashlib.sha256((torch_index or "pypi").encode()).hexdigest()[:8]
    return f"torch{torch}-cu{compact(major_minor(cuda))}-py{python}-{index}"


def provide_torch(torch: Version, cuda: Version, torch_index: str | None, cache: Path,
                  log: Log, python: str = sys.executable, create: bool = True) -> TorchEnv:
    """A cached environment holding torch `torch` built for CUDA `cuda` (from `torch_index`,
    else PyPI), made on first use; with `create` false it must exist already, and the cache is
    only read (it may be read-only)."""
    python_version = subprocess.run(
        [python, "-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"],
        capture_output=True, text=True, check=True).stdout.strip()
    root = cache / "envs" / env_key(torch, cuda, torch_index, python_version)
    marker = root / _MARKER
    if create:
        with exclusive(root):
            if not marker.is_file():
                _create(root, torch, torch_index, cache, log, python)
            info = json.loads(marker.read_text())
    elif marker.is_file():
        info = json.loads(marker.read_text())
    else:
        raise BuildError(f"the environment for {torch_requirement(torch)} was not prepared "
                         f"({root} is missing)")
    env = TorchEnv(
        root=root, python=root / "bin" / "python", site_packages=root / info["site_packages"],
        torch_version=info["torch_version"],
        torch_cuda=parse_release(info["torch_cuda"]) if info["torch_cuda"] else None,
        cxx11_abi=info["cxx11_abi"], python_include=Path(info["python_include"]),
    )
    _check_cuda(env, cuda)
    return env


def _create(root: Path, torch: Version, torch_index: str | None, cache: Path, log: Log,
            python: str) -> None:
    requirement = torch_requirement(torch)
    source = torch_index or "PyPI"
    log.step(f"making the environment for {requirement} ({source}) in {root}")
    if root.exists():
        shutil.rmtree(root)
    env = uv_env(cache)
    run([uv_bin(), "venv", "--quiet", "--python", python, root], log, env=env,
        what="making the torch environment")
    index = ["--index", torch_index] if torch_index else []
    run([uv_bin(), "pip", "install", "--quiet", "--python", root / "bin" / "python", *index,
         requirement], log, env=env, what=f"installing {requirement} from {source}")
    probe = run([root / "bin" / "python", "-c",
                 "import sysconfig, json; p = sysconfig.get_paths(); "
                 "print(json.dumps([p['purelib'], p['include']]))"], log,
                what="reading the environment's paths")
    purelib, include = json.loads(probe.strip().splitlines()[-1])
    site = Path(purelib)
    if not (Path(include) / "Python.h").is_file():
        raise BuildError(f"Python headers are missing ({include}/Python.h); install the "
                         "development package of this Python (e.g. python3-dev)")
    info = {
        "site_packages": str(site.relative_to(root)),
        "torch_version": _installed_version(site),
        "torch_cuda": _torch_cuda(site),
        "cxx11_abi": _uses_cxx11_abi(site / "torch" / "lib"),
        "python_include": include,
    }
    (root / _MARKER).write_text(json.dumps(info, indent=1))


def _installed_version(site: Path) -> str:
    for dist_info in site.glob("torch-*.dist-info"):
        for line in (dist_info / "METADATA").read_text().splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
    raise BuildError(f"torch is not installed in {site}")


def _torch_cuda(site: Path) -> str | None:
    """torch.version.cuda, read from the file rather than by importing torch."""
    text = (site / "torch" / "version.py").read_text()
    match = re.search(r"^cuda\s*(?::[^=\n]*)?=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE)
    return match.group(1) if match else None


def _uses_cxx11_abi(lib: Path) -> bool:
    """Whether torch was built with libstdc++'s C++11 ABI: its mangled names say so."""
    library = lib / "libc10.so"
    if not library.is_file():
        raise BuildError(f"libc10.so is missing from {lib}")
    return b"St7__cxx11" in library.read_bytes()


def _check_cuda(env: TorchEnv, cuda: Version) -> None:
    wanted = major_minor(cuda)
    if env.torch_cuda is None:
        raise BuildError(f"torch {env.torch_version} in {env.root} is a CPU build; the cell "
                         f"needs a CUDA {wanted} build (set cuda.\"{wanted}\".torch-index)")
    if major_minor(env.torch_cuda) != wanted:
        raise BuildError(f"torch {env.torch_version} is a CUDA {env.torch_cuda} build, the cell "
                         f"is CUDA {wanted}: point cuda.\"{wanted}\".torch-index at an index "
                         f"of CUDA {wanted} builds")
