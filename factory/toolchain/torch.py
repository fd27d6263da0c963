"""Torch environments. Two providers: a virtual environment per torch version and CUDA flavour,
made with uv and kept in the cache (provide_torch), or a torch already installed in an
interpreter of this machine or of an image (installed_env), used as it is, never changed.

Whichever provides it, the build sees a TorchEnv: where torch's headers and libraries are, its
exact version, its CUDA version and C++ ABI."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import distributions
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import Version as PackagingVersion

from .. import defaults
from ..config.torches import InstalledTorch
from ..errors import BuildError
from ..sources.installed import ProbeError, probe_interpreter
from ..system.cache import exclusive
from ..system.process import Log, ProcessError, bounded_run, first_output_line, run
from ..system.uv import uv_bin, uv_env
from ..values.versions import Version, compact, major_minor, parse_release

__all__ = ["TorchEnv", "env_beside_torch", "env_key", "find_links", "installed_env",
           "provide_torch", "check_cuda", "torch_constraints", "torch_requirement",
           "torch_requires", "viewing"]

_MARKER = "factory-env.v3.json"  # v3: with the compile definitions of torch's CMake targets


@dataclass(frozen=True)
class TorchEnv:
    root: Path
    python: Path
    site_packages: Path
    torch_version: str  # as installed, e.g. "2.11.0+cu130"
    torch_cuda: Version | None  # the CUDA version torch was built with (None: CPU build)
    cxx11_abi: bool
    python_include: Path
    cuda_library_includes: tuple[Path, ...]  # headers of the CUDA libraries torch's headers
    # include (cuBLAS, cuSPARSE, ...), installed with torch as nvidia-* wheels
    definitions: tuple[str, ...] = ()  # what torch's CMake targets define (USE_C10D_NCCL, ...)
    platform: str | None = None  # another platform's torch (emulated.py); None: this machine's
    emulated: tuple[str, ...] = ()  # the Debian packages its emulated CPython is made of

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
    def python_includes(self) -> list[Path]:
        """Python's header folders: an emulated Debian CPython's pyconfig.h includes the one
        of its architecture, from the folder above."""
        if self.platform is None:
            return [self.python_include]
        return [self.python_include, self.python_include.parent]

    @property
    def cuda_runtime(self) -> Path | None:
        """The folder of the CUDA runtime library to link against, where it is not the
        toolkit's: another platform's, from torch's nvidia-* wheels."""
        if self.platform is None:
            return None
        found = sorted(self.site_packages.glob("nvidia/*/lib/libcudart.so.*"))
        return found[0] if found else None



def installed_env(installed: InstalledTorch) -> TorchEnv:
    """The TorchEnv of a torch already installed (its paths are the interpreter's own: on this
    machine, or inside its image). `root`, which builds rewrite to a fixed name, is the
    interpreter's prefix where torch lies under it."""
    site = Path(installed.site_packages)
    prefix = Path(installed.prefix)
    return TorchEnv(
        root=prefix if site.is_relative_to(prefix) else site, python=Path(installed.python),
        site_packages=site, torch_version=installed.version,
        torch_cuda=installed.cuda_release, cxx11_abi=installed.cxx11_abi,
        python_include=Path(installed.python_include),
        cuda_library_includes=tuple(Path(path) for path in installed.library_includes),
        definitions=installed.definitions)


def torch_requirement(torch: Version) -> str:
    return f"torch=={torch}.*" if len(torch.release) == 2 else f"torch=={torch}"


def env_key(torch: Version, cuda: Version | None, torch_index: str | None, python: str) -> str:
    index = hashlib.sha256((torch_index or "pypi").encode()).hexdigest()[:8]
    build = f"cu{compact(major_minor(cuda))}" if cuda is not None else "cpu"
    return f"torch{torch}-{build}-py{python}-{index}"


def provide_torch(torch: Version, cuda: Version | None, torch_index: str | None, cache: Path,
                  log: Log, python: str = sys.executable, create: bool = True,
                  offline: bool = False) -> TorchEnv:
    """A cached environment holding torch `torch` built for CUDA `cuda` (from `torch_index`,
    else PyPI; `cuda` None: whichever build the index has, for a CPU cell), made on first use
    (`offline`: from uv's cache only); with `create` false it must exist already, and the cache
    is only read (it may be read-only)."""
    try:
        asked = bounded_run(  # 3.12, or 3.14t for a free-threaded one
            [python, "-c", "import sys, sysconfig; print(f'{sys.version_info[0]}."
             "{sys.version_info[1]}' + ('t' if sysconfig.get_config_var('Py_GIL_DISABLED') "
             "else ''))"], defaults.COMPILER_PROBE_TIMEOUT)
    except ProcessError as exc:
        raise BuildError(f"the interpreter {python} cannot be run ({exc})") from None
    if asked.returncode != 0:
        raise BuildError(f"the interpreter {python} cannot be run (exit {asked.returncode})")
    python_version = asked.stdout.strip()
    root = cache / "envs" / env_key(torch, cuda, torch_index, python_version)
    marker = root / _MARKER
    if create:
        with exclusive(root):
            if not marker.is_file():
                _create(root, torch, torch_index, cache, log, python, offline)
            info = json.loads(marker.read_text())
    elif marker.is_file():
        info = json.loads(marker.read_text())
    else:
        raise BuildError(f"the environment for {torch_requirement(torch)} was not prepared "
                         f"({root} is missing)")
    site = root / info["site_packages"]
    env = TorchEnv(
        root=root, python=root / "bin" / "python", site_packages=site,
        torch_version=info["torch_version"],
        torch_cuda=parse_release(info["torch_cuda"]) if info["torch_cuda"] else None,
        cxx11_abi=info["cxx11_abi"], python_include=Path(info["python_include"]),
        cuda_library_includes=tuple(sorted(path for path in (site / "nvidia").glob("*/include")
                                           if path.is_dir())),
        definitions=tuple(info["definitions"]),
    )
    if cuda is not None:
        check_cuda(env, cuda)
    return env


def _create(root: Path, torch: Version, torch_index: str | None, cache: Path, log: Log,
            python: str, offline: bool) -> None:
    requirement = torch_requirement(torch)
    source = torch_index or "PyPI"
    if offline:
        source += ", offline: from uv's cache only"
    log.step(f"making the environment for {requirement} ({source}) in {root}")
    if root.exists():
        shutil.rmtree(root)
    env = uv_env(cache, offline)
    run([uv_bin(), "venv", "--quiet", "--python", python, root], log,
        timeout=defaults.STEP_TIMEOUT, env=env,
        what="making the torch environment")
    index = ["--index", torch_index] if torch_index else []
    run([uv_bin(), "pip", "install", "--quiet", "--python", root / "bin" / "python", *index,
         requirement], log,
        timeout=defaults.STEP_TIMEOUT, env=env, what=f"installing {requirement} from {source}")
    try:
        found = probe_interpreter(root / "bin" / "python", require_cuda=False)
    except ProbeError as exc:
        raise BuildError(f"the environment for {requirement}: {exc}") from None
    info = {
        "site_packages": str(Path(found.site_packages).relative_to(root)),
        "torch_version": found.version,
        "torch_cuda": found.cuda,
        "cxx11_abi": found.cxx11_abi,
        "python_include": found.python_include,
        "definitions": list(found.definitions),
    }
    (root / _MARKER).write_text(json.dumps(info, indent=1))


def check_cuda(env: TorchEnv, cuda: Version) -> None:
    """Refuse a torch that is not a build of CUDA `cuda`'s major.minor."""
    wanted = major_minor(cuda)
    if env.torch_cuda is None:
        raise BuildError(f"torch {env.torch_version} in {env.root} is a CPU build; the cell "
                         f"needs a CUDA {wanted} build (set cuda.\"{wanted}\".torch-index)")
    if major_minor(env.torch_cuda) != wanted:
        raise BuildError(f"torch {env.torch_version} is a CUDA {env.torch_cuda} build, the cell "
                         f"is CUDA {wanted}: point cuda.\"{wanted}\".torch-index at an index "
                         f"of CUDA {wanted} builds")


def env_beside_torch(root: Path, torch: TorchEnv, requires: list[str], cache: Path, log: Log,
                     offline: bool, what: str, own_torch: str,
                     wheelhouses: tuple[Path, ...] = (), view: bool = False) -> Path:
    """A virtual environment at `root` (made afresh) of the torch environment's CPython that
    sees its torch (a .pth file names its site-packages) and holds `requires`, bounded by
    torch's own requirements (torch 2.11 wants setuptools<82, say), as wheels only (a source
    distribution's build runs its code, and a kernel names what is installed here): a second
    torch is never installed beside it (`own_torch` says so when a requirement pulls one in).
    `wheelhouses` are folders of wheels uv may take them from; with `view`, what is installed
    beside torch counts as installed while uv installs (viewing). Its site-packages folder."""
    if root.exists():
        shutil.rmtree(root)
    env = uv_env(cache, offline)
    run([uv_bin(), "venv", "--quiet", "--python", torch.python, root], log,
        timeout=defaults.STEP_TIMEOUT, env=env,
        what="making an environment beside torch")
    python = root / "bin" / "python"
    site = Path(first_output_line(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]))
    (site / "_kernel_wheel_factory_torch.pth").write_text(f"{torch.site_packages}\n")
    constraints = torch_constraints(root, torch, pinned=view)
    if requires:
        with viewing(site, torch.site_packages, view):
            run([uv_bin(), "pip", "install", "--quiet", "--no-build", "--python", python,
                 "--constraint", constraints, *find_links(wheelhouses), *requires], log,
                timeout=defaults.STEP_TIMEOUT, env=env, what=what)
    if (site / "torch").exists():
        raise BuildError(own_torch)
    return site


def find_links(wheelhouses: tuple[Path, ...]) -> list[str]:
    """uv's arguments that let it take wheels from these folders, offline or not."""
    return [f"--find-links={folder}" for folder in wheelhouses]


VIEW_INSTALLER = "kernel-wheel-factory-view"


@contextmanager
def viewing(site: Path, beside: Path, view: bool = True) -> Iterator[None]:
    """While uv installs into the environment of `site` (which sees `beside` through a .pth
    file), what is installed in `beside` counts as installed there: for each distribution
    of `beside`, a .dist-info folder in `site` with its METADATA and a RECORD that lists only
    that folder. uv then takes the requirements it meets as met, without a copy of any
    package; where a requirement needs another version, uv replaces the view's entry (its
    RECORD removes nothing else) and installs that version in `site`, ahead of `beside` on the
    path. The view is gone afterwards: at run time the distributions are found where they are
    (their entry points, which Triton finds its backends by, their files). `beside` is only
    read. Written by hand: no installer makes an environment count another's packages as its
    own."""
    if not view:
        yield
        return
    made = []
    for info in sorted(beside.glob("*.dist-info")):
        metadata = info / "METADATA"
        entry = site / info.name
        if not info.is_dir() or not metadata.is_file() or entry.exists():
            continue
        entry.mkdir()
        (entry / "METADATA").write_bytes(metadata.read_bytes())
        (entry / "INSTALLER").write_text(f"{VIEW_INSTALLER}\n")
        (entry / "RECORD").write_text("".join(f"{info.name}/{name},,\n"
                                              for name in ("METADATA", "INSTALLER", "RECORD")))
        made.append(entry)
    try:
        yield
    finally:
        for entry in made:  # those uv did not replace
            marker = entry / "INSTALLER"
            if marker.is_file() and marker.read_text().strip() == VIEW_INSTALLER:
                shutil.rmtree(entry)


def torch_constraints(root: Path, torch: TorchEnv, pinned: bool = False) -> Path:
    """root/torch-constraints.txt: torch's own requirements, which bound what an environment
    beside it installs (`pinned`: and torch's exact version, which a view counts as
    installed)."""
    constraints = root / "torch-constraints.txt"
    # the public version: torch's metadata may say 2.11.0 where torch.__version__ says
    # 2.11.0+cu130, and ==2.11.0 takes either
    pin = [f"torch=={PackagingVersion(torch.torch_version).public}"] if pinned else []
    constraints.write_text("".join(f"{line}\n" for line in [*pin, *torch_requires(torch)]))
    return constraints


def torch_requires(torch: TorchEnv) -> list[str]:
    """The Requires-Dist of the cell's torch (its extras' left out)."""
    for found in distributions(path=[str(torch.site_packages)]):
        if canonicalize_name(found.metadata["Name"] or "") == "torch":
            return [text for text in found.requires or [] if "extra ==" not in text]
    return []
