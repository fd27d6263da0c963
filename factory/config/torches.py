"""Torches already installed: the interpreter or container image a matrix's torch entry names,
read once while planning. What is read decides the cell's label, its torch pin and its import
guard, and goes into its fingerprint, so a changed torch means a new build.

The probe is a small standard-library script run with the named interpreter (on this machine,
or in the image with the network off): it reads torch's version.py and libc10.so instead of
importing torch, which is slow and may need a GPU driver. In an image it also finds the CUDA
toolkit (CUDA_HOME, nvcc on PATH, /usr/local/cuda) and the C++ compilers on PATH.

Release builds (2.11.0, 2.11.0+cu130: what PyPI and PyTorch's indexes serve) are labelled and
pinned like index builds (cu130torch211, torch==2.11.*): the same release line has one C++ ABI.
Any other build (NVIDIA's 2.5.0a0+e000cf0ad9.nv24.10, a nightly, a source build) is bound to
exactly that build: its label gets a build tag (cu126torch25.nv2410; `nvYYMM` for NVIDIA's
container releases, else `t` and 8 hex digits of the version's sha256), its wheel requires
torch==<that version> and its import guard accepts only that version.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import subprocess
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion

from ..process import bounded_run
from ..versions import Version, major_minor

__all__ = ["PROBE", "InstalledTorch", "ProbeError", "build_tag", "is_release_build", "probe_image",
           "probe_interpreter"]

PROBE_TIMEOUT = 120  # seconds; an image's first start can be slow

# Runs under any Python 3.6+, with nothing but the standard library.
PROBE = r"""
import glob, importlib.util, json, os, re, shutil, subprocess, sys, sysconfig

def version_field(text, name):
    found = re.search(r"^%s\s*(?::[^=\n]*)?=\s*['\"]([^'\"]*)['\"]" % name, text, re.M)
    return found.group(1) if found else None

def first_line(argv):
    try:
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None

out = {"python_version": "%d.%d" % sys.version_info[:2], "prefix": sys.prefix,
       "include": sysconfig.get_paths()["include"]}
out["python_h"] = os.path.isfile(os.path.join(out["include"], "Python.h"))
spec = importlib.util.find_spec("torch")
locations = list(spec.submodule_search_locations or []) if spec else []
if locations and os.path.isfile(os.path.join(locations[0], "version.py")):
    torch_dir = locations[0]
    with open(os.path.join(torch_dir, "version.py")) as handle:
        text = handle.read()
    out["torch"] = version_field(text, "__version__")
    out["cuda"] = version_field(text, "cuda")
    out["torch_dir"] = torch_dir
    out["site"] = os.path.dirname(torch_dir)
    libc10 = os.path.join(torch_dir, "lib", "libc10.so")
    out["libc10"] = os.path.isfile(libc10)
    # The C++ ABI torch was built with: what its CMake config tells extensions, else what the
    # mangled name of one function every torch exports says (std::string spelled Ss or
    # NSt7__cxx11...); a mere mention of __cxx11 proves nothing (torch 2.6 has some).
    config = os.path.join(torch_dir, "share", "cmake", "Torch", "TorchConfig.cmake")
    flag = None
    if os.path.isfile(config):
        with open(config) as handle:
            flag = re.search(r"-D_GLIBCXX_USE_CXX11_ABI=([01])", handle.read())
    if flag:
        out["cxx11_abi"] = flag.group(1) == "1"
    elif out["libc10"]:
        with open(libc10, "rb") as handle:
            data = handle.read()
        out["cxx11_abi"] = b"torchCheckFailEPKcS2_jRKSs" not in data and b"St7__cxx11" in data
    # The compile definitions torch's CMake targets give whatever links them (USE_C10D_NCCL,
    # ...): what a kernel-builder build of an extension is compiled with.
    definitions = []
    targets = os.path.join(torch_dir, "share", "cmake", "Caffe2", "Caffe2Targets.cmake")
    if os.path.isfile(targets):
        with open(targets) as handle:
            text = handle.read()
        for target in ("torch_cpu", "torch_cuda"):
            block = re.search(r"set_target_properties\(%s PROPERTIES\n(.*?)\n\)" % target,
                              text, re.S)
            found = block and re.search(r'INTERFACE_COMPILE_DEFINITIONS "([^"$]*)"',
                                        block.group(1))
            if found:
                definitions += [item for item in found.group(1).split(";") if item]
    out["definitions"] = sorted(set(definitions))
    out["library_includes"] = sorted(
        path for path in glob.glob(os.path.join(out["site"], "nvidia", "*", "include"))
        if os.path.isdir(path))
if "--toolkit" in sys.argv:
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        homes.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
    homes += ["/usr/local/cuda", "/usr/lib/cuda"]
    for home in homes:
        if home and os.path.isfile(os.path.join(home, "bin", "nvcc")):
            home = os.path.realpath(home)
            text = first_line([os.path.join(home, "bin", "nvcc"), "--version"])
            libs = [os.path.join(home, name) for name in
                    ("lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib",
                     "lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu")]
            libs = [lib for lib in libs if glob.glob(os.path.join(lib, "libcudart.so*"))]
            out["toolkit"] = {"home": home, "nvcc": text or "", "lib": libs[0] if libs else None}
            break
    compilers = {}
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        for path in sorted(glob.glob(os.path.join(folder, "g++*"))):
            name = os.path.basename(path)
            if re.fullmatch(r"g\+\+(-\d+)?", name) and name not in compilers:
                compilers[name] = (first_line([path, "-dumpfullversion"]) or "").strip()
    out["compilers"] = compilers
print(json.dumps(out))
"""


@dataclass(frozen=True)
class InstalledTorch:
    """A torch some interpreter already has, as the probe read it."""

    python: str  # the interpreter, as named (a path on this machine, or in the image)
    version: str  # torch.__version__, e.g. "2.11.0+cu130" or "2.5.0a0+e000cf0ad9.nv24.10"
    cuda: str | None  # torch.version.cuda (None: a CPU build, refused for a matrix's torch)
    cxx11_abi: bool
    python_version: str  # "3.12"
    prefix: str
    site_packages: str  # the folder holding torch/
    python_include: str
    library_includes: tuple[str, ...]  # headers of the nvidia-* wheels beside torch
    definitions: tuple[str, ...] = ()  # what torch's CMake targets define for extensions
    image: str | None = None  # the container image it lives in; None: this machine
    image_id: str | None = None
    toolkit_home: str | None = None  # an image's CUDA toolkit
    toolkit_version: str | None = None
    toolkit_lib: str | None = None
    compilers: tuple[tuple[str, str], ...] = ()  # an image's g++ commands and their versions

    @property
    def release(self) -> Version:
        """torch's major.minor."""
        return major_minor(Version(self.version))

    @property
    def cuda_release(self) -> Version:
        assert self.cuda is not None, "a CPU build of torch"
        return major_minor(Version(self.cuda))

    @property
    def exact(self) -> bool:
        """Whether wheels built against it fit this build only (see the module's text)."""
        return not is_release_build(self.version)

    @property
    def tag(self) -> str | None:
        return build_tag(self.version)

    @property
    def pin(self) -> str:
        """The Requires-Dist specifier of torch for wheels built against it."""
        return f"=={self.version}" if self.exact else f"=={self.release}.*"

    def describe(self) -> str:
        where = f"{self.python} in {self.image}" if self.image else self.python
        return f"torch {self.version} (CUDA {self.cuda}) from {where}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> InstalledTorch:
        fields = dict(data)
        fields["library_includes"] = tuple(fields.get("library_includes", ()))
        fields["definitions"] = tuple(fields.get("definitions", ()))
        fields["compilers"] = tuple(tuple(pair) for pair in fields.get("compilers", ()))
        return cls(**fields)


_RELEASE_LOCAL = re.compile(r"cu\d+|cpu|rocm\d+(\.\d+)*|xpu")
_NGC = re.compile(r"(?:^|\.)nv(\d{2})\.(\d{1,2})(?:\.|$)")


def is_release_build(version: str) -> bool:
    """Whether a torch version is one the package indexes publish: a final release, with no
    local part or a CUDA/CPU flavour (2.11.0+cu130)."""
    parsed = Version(version)
    if parsed.is_prerelease or parsed.is_devrelease or parsed.is_postrelease:
        return False
    return parsed.local is None or bool(_RELEASE_LOCAL.fullmatch(parsed.local))


def build_tag(version: str) -> str | None:
    """What a label adds for a torch build no index publishes (None for release builds)."""
    if is_release_build(version):
        return None
    found = _NGC.search(Version(version).local or "")
    if found:
        return f"nv{found[1]}{int(found[2]):02d}"
    return "t" + hashlib.sha256(str(Version(version)).encode()).hexdigest()[:8]


class ProbeError(Exception):
    """The named interpreter or image could not be read; the message says why."""


def probe_interpreter(python: Path, require_cuda: bool = True) -> InstalledTorch:
    """Read the torch of an interpreter on this machine (a CUDA build, unless told
    otherwise)."""
    try:
        done = bounded_run([str(python), "-c", PROBE], PROBE_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise ProbeError(f"{python} gave no answer within {PROBE_TIMEOUT} s") from None
    except (OSError, subprocess.SubprocessError) as exc:
        raise ProbeError(f"cannot run {python}: {exc}") from None
    return _installed(str(python), _answer(done, str(python)), require_cuda)


def probe_image(image: str, python: str, offline: bool = False,
                docker: str = "docker") -> InstalledTorch:
    """Read the torch, CUDA toolkit and compilers of a container image (pulled if missing,
    unless `offline`), running its interpreter with the network off."""
    try:
        inspect = subprocess.run([docker, "image", "inspect", "--format", "{{.Id}}", image],
                                 capture_output=True, text=True, timeout=PROBE_TIMEOUT)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ProbeError(f"cannot read the image with docker: {exc}") from None
    if inspect.returncode != 0 and offline:
        raise ProbeError("the image is not here, and --offline does not pull it")
    if inspect.returncode != 0:
        pull = subprocess.run([docker, "pull", "--quiet", image], capture_output=True, text=True)
        if pull.returncode != 0:
            lines = (pull.stderr or pull.stdout).strip().splitlines()
            raise ProbeError(f"the image is not here and cannot be pulled "
                             f"({lines[-1] if lines else 'no output'})")
        inspect = subprocess.run([docker, "image", "inspect", "--format", "{{.Id}}", image],
                                 capture_output=True, text=True)
    # named, so that a probe that hangs or floods is removed with its container
    name = f"kernel-wheel-factory-probe-{secrets.token_hex(6)}"
    try:
        done = bounded_run([docker, "run", "--rm", "--name", name, "--network", "none",
                            "--entrypoint", "", image, python, "-c", PROBE, "--toolkit"],
                           PROBE_TIMEOUT)
    except (OSError, subprocess.SubprocessError) as exc:
        subprocess.run([docker, "rm", "--force", name], capture_output=True,
                       timeout=PROBE_TIMEOUT)
        said = f"gave no answer within {PROBE_TIMEOUT} s" \
            if isinstance(exc, subprocess.TimeoutExpired) else f"cannot be run ({exc})"
        raise ProbeError(f"{python} in {image} {said}") from None
    answer = _answer(done, f"{python} in {image}")
    toolkit = answer.get("toolkit")
    if not toolkit:
        raise ProbeError(f"{image} has no CUDA toolkit (no bin/nvcc under CUDA_HOME, on PATH or "
                         "in /usr/local/cuda)")
    found = re.search(r"release \d+\.\d+, V(\d+\.\d+\.\d+)", toolkit["nvcc"])
    if not found:
        raise ProbeError(f"cannot read the version of {toolkit['home']}/bin/nvcc in {image}")
    if not toolkit.get("lib"):
        raise ProbeError(f"{image}: the toolkit at {toolkit['home']} has no libcudart")
    return replace(
        _installed(python, answer), image=image, image_id=inspect.stdout.strip(),
        toolkit_home=toolkit["home"], toolkit_version=found[1], toolkit_lib=toolkit["lib"],
        compilers=tuple(sorted(answer.get("compilers", {}).items())))


def _answer(done: subprocess.CompletedProcess[str], what: str) -> dict[str, Any]:
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        raise ProbeError(f"{what} failed (exit {done.returncode}): "
                         f"{lines[-1] if lines else 'no output'}")
    try:
        answer = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise ProbeError(f"{what} gave no answer (is it a Python interpreter?)") from None
    if not isinstance(answer, dict):
        raise ProbeError(f"{what} gave no answer (is it a Python interpreter?)")
    return answer


def _installed(python: str, answer: dict[str, Any], require_cuda: bool = True) -> InstalledTorch:
    version = answer.get("torch")
    if not version:
        raise ProbeError(f"{python} has no torch installed")
    try:
        Version(version)
    except InvalidVersion:
        raise ProbeError(f"{python} has torch '{version}', which is not a version the factory "
                         "can label (PEP 440)") from None
    if not answer.get("cuda") and require_cuda:
        raise ProbeError(f"{python} has torch {version}, a build without CUDA; the factory "
                         "builds CUDA kernels against a CUDA build of torch")
    if not answer.get("libc10"):
        raise ProbeError(f"{python} has torch {version} without its libraries "
                         f"({answer['torch_dir']}/lib/libc10.so is missing)")
    if not answer.get("python_h"):
        raise ProbeError(f"{python} has no Python headers ({answer['include']}/Python.h); "
                         "install its development package (e.g. python3-dev)")
    return InstalledTorch(
        python=python, version=version, cuda=answer.get("cuda") or None,
        cxx11_abi=bool(answer.get("cxx11_abi")), python_version=answer["python_version"],
        prefix=answer["prefix"], site_packages=answer["site"],
        python_include=answer["include"],
        library_includes=tuple(answer.get("library_includes", ())),
        definitions=tuple(answer.get("definitions", ())),
    )
