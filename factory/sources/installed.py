"""Reading the torches a matrix names as already installed: an interpreter of this machine, or
one in a container image.

The probe is a small standard-library script run with the named interpreter (on this machine,
or in the image with the network off): it reads torch's version.py and libc10.so instead of
importing torch, which is slow and may need a GPU driver. In an image it also finds the CUDA
toolkit (CUDA_HOME, nvcc on PATH, /usr/local/cuda) and the C++ compilers on PATH.

An image is asked through the container engine (system/engine.py): pulled when missing (unless
offline), then probed in a labelled container with the network off and a time limit.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion

from ..config.model import Matrix, TorchEntry
from ..config.torches import InstalledTorch
from ..errors import BuildError, ConfigError, FactoryError
from ..system.engine import Engine
from ..system.process import ProcessError, TimedOut, bounded_run
from ..values.versions import Version, major_minor

__all__ = ["PROBE", "ProbeError", "probe_image", "probe_interpreter", "read_torches"]

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
            try:
                options = subprocess.run([os.path.join(home, "bin", "nvcc"), "--help"],
                                         capture_output=True, text=True, timeout=60).stdout
            except (OSError, subprocess.SubprocessError):
                options = ""
            out["toolkit"] = {"home": home, "nvcc": text or "", "lib": libs[0] if libs else None,
                              "seeds": "--frandom-seed" in options}
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


class ProbeError(FactoryError):
    """The named interpreter or image could not be read; the message says why."""


def probe_interpreter(python: Path, require_cuda: bool = True) -> InstalledTorch:
    """Read the torch of an interpreter on this machine (a CUDA build, unless told
    otherwise)."""
    try:
        done = bounded_run([str(python), "-c", PROBE], PROBE_TIMEOUT)
    except TimedOut:
        raise ProbeError(f"{python} gave no answer within {PROBE_TIMEOUT} s") from None
    except ProcessError as exc:
        raise ProbeError(f"cannot run {python}: {exc}") from None
    return _installed(str(python), _answer(done.returncode, done.stdout, done.stderr,
                                           str(python)), require_cuda)


def probe_image(image: str, python: str, offline: bool = False,
                engine: Engine | None = None) -> InstalledTorch:
    """Read the torch, CUDA toolkit and compilers of a container image (pulled if missing,
    unless `offline`), running its interpreter with the network off."""
    if engine is None:
        with Engine() as own:
            return probe_image(image, python, offline, own)
    try:
        image_id = engine.image_id(image)
        if image_id is None:
            if offline:
                raise ProbeError("the image is not here, and --offline does not pull it")
            failure = engine.pull(image)
            if failure is not None:
                raise ProbeError(f"the image is not here and cannot be pulled ({failure})")
            image_id = engine.image_id(image)
            if image_id is None:
                raise ProbeError("the image cannot be read after it was pulled")
        status, out, err = engine.probe(image, [python, "-c", PROBE, "--toolkit"],
                                        PROBE_TIMEOUT)
    except BuildError as exc:
        raise ProbeError(f"{python} in {image}: {exc}") from None
    answer = _answer(status, out, err, f"{python} in {image}")
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
        _installed(python, answer), image=image, image_id=image_id,
        toolkit_home=toolkit["home"], toolkit_version=found[1], toolkit_lib=toolkit["lib"],
        toolkit_seeds=toolkit.get("seeds") is True,
        compilers=tuple(sorted(answer.get("compilers", {}).items())))


def _answer(status: int, stdout: str, stderr: str, what: str) -> dict[str, Any]:
    if status != 0:
        lines = (stderr or stdout).strip().splitlines()
        raise ProbeError(f"{what} failed (exit {status}): "
                         f"{lines[-1] if lines else 'no output'}")
    try:
        answer = json.loads(stdout.strip().splitlines()[-1])
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


def read_torches(matrix: Matrix, offline: bool = False) -> Matrix:
    """The matrix with every installed torch read (its interpreter or image probed), each
    checked against the matrix's CUDA versions."""
    entries = []
    for entry in matrix.torch:
        if entry.python is None:
            entries.append(entry)
            continue
        try:
            if entry.image is not None:
                installed = probe_image(entry.image, entry.python, offline=offline)
            else:
                installed = probe_interpreter(Path(entry.python))
        except ProbeError as exc:
            raise _entry_error(matrix, entry, str(exc)) from None
        cudas = [major_minor(cuda.version) for cuda in matrix.cuda]
        if installed.cuda_release not in cudas:
            raise _entry_error(matrix, entry, (
                f"{installed.describe()} is a CUDA {installed.cuda_release} build; add "
                f"cuda: {{\"{installed.cuda_release}\": {{sms: [...]}}}} to the matrix "
                f"(it lists {', '.join(str(cuda) for cuda in cudas)})"))
        for other in entries:
            if other.release == installed.release and \
                    (other.installed.tag if other.installed else None) == installed.tag:
                raise _entry_error(matrix, entry, (
                    f"{installed.describe()} would make the same wheels as {other.describe()} "
                    f"({other.key}): list torch {installed.release} once"))
        entries.append(replace(entry, installed=installed))
    return replace(matrix, torch=tuple(entries))


def _entry_error(matrix: Matrix, entry: TorchEntry, message: str) -> ConfigError:
    if entry.line is None:  # from the command line
        return ConfigError(message, key=entry.key)
    return ConfigError(message, file=matrix.path, line=entry.line, key=entry.key)
