"""The checks every wheel passes before it is published. Each returns the problems it found, in
words a user can act on; an empty list means the wheel may go out.

- abi3: no Python symbol outside the limited API the tag promises (abi3audit's verdict);
- manylinux: every manylinux tag on the wheel is one its symbols allow (auditwheel's policies:
  symbol versions, and the symbols no manylinux system may be relied on for);
- libraries: no copy of a torch or CUDA library inside, and every DT_NEEDED is provided by the
  system, by torch (of the cell's CUDA major) or by the wheel itself;
- GPU code: SASS for every SM the cell promised, PTX only where promised (the newest SM); for a
  project that compiles with its own arch list, SASS for every SM of the cell in each shared
  object that has GPU code, whatever else it holds;
- metadata: the filename, METADATA, WHEEL and RECORD agree, and the torch pin is the cell's;
- stable ABI: a kernel that declares torch's stable ABI calls none of torch's C++ outside it
  (only the C shim, torch::stable and torch::headeronly), read from its dynamic symbols;
- cubins: a cuTile wheel ships, for every signature its manifest lists, a cubin for each SM the
  cell promises, each the code of the SM it is filed under (read from its ELF header);
- size: the wheel is no bigger than the limit the matrix or the command line sets (PyPI's 100
  MiB, a GitHub release asset's 2 GiB, or any size), with its biggest GPU code named.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from packaging.utils import canonicalize_name

from ..config.model import SizeLimit
from ..values.units import human_size
from .inspect import WheelReport
from .manylinux import GLIBC_LOADERS, system_libraries, tag_glibc
from .repair import PROVIDED_BY_TORCH

__all__ = ["PROVIDED_BY_DRIVER", "Expectation", "check_wheel"]

# The NVIDIA driver's own libraries: on every machine that can run the kernel.
PROVIDED_BY_DRIVER = ("libcuda.so.1", "libnvidia-ml.so.1")
_CUDART = re.compile(r"libcudart\.so\.(\d+)")


@dataclass(frozen=True)
class Expectation:
    """What a wheel must be, from the cell it was built for."""

    name: str
    version: str  # with its local label
    torch: str | None  # the torch requirement's specifier: ==2.11.*; None: not checked
    cuda_major: int | None  # None: no CUDA code
    gpu_code: frozenset[str] | None  # sm_90, compute_90, ...; None: not checked
    arch: str | None  # x86_64, aarch64; None for pure wheels
    gpu_covers: bool = False  # gpu_code is a floor (per shared object), not the exact set
    stable_abi: str | None = None  # the torch version of the stable ABI the kernel declares
    max_size: SizeLimit | None = None  # the most bytes the wheel may have
    cpu_only: bool = False  # a CPU build: it may need no CUDA library (it must load without)
    cubins: frozenset[str] | None = None  # a cuTile wheel's SMs: a cubin per signature each


def check_wheel(report: WheelReport, expect: Expectation) -> list[str]:
    return [
        *_check_metadata(report, expect),
        *_check_abi3(report),
        *_check_manylinux(report),
        *_check_libraries(report, expect),
        *_check_gpu_code(report, expect),
        *_check_cubins(report, expect),
        *_check_stable_abi(report, expect),
        *_check_size(report, expect),
    ]


def _check_size(report: WheelReport, expect: Expectation) -> list[str]:
    limit = expect.max_size
    if limit is None or report.size <= limit.bytes:
        return []
    codes = report.gpu_sizes
    biggest = sorted(codes.items(), key=lambda item: -item[1].stored)[:4]
    where = "; its GPU code: " + ", ".join(f"{code} {human_size(size.stored)}"
                                           for code, size in biggest) if biggest else ""
    compressed = all(size.compressed for size in codes.values())
    advice = ("build it for fewer SMs per wheel" if compressed
              else "compress its GPU code (compress: size), or build it for fewer SMs")
    installed = human_size(report.wheel.installed_size)
    return [f"size: the wheel is {human_size(report.size)} ({installed} installed), over "
            f"{limit.describe()}{where}; {advice}"]


def _check_stable_abi(report: WheelReport, expect: Expectation) -> list[str]:
    if expect.stable_abi is None:
        return []
    problems = []
    for so in report.shared_objects:
        if so.torch_cxx:
            shown = "; ".join(so.torch_cxx[:3])
            more = f" and {len(so.torch_cxx) - 3} more" if len(so.torch_cxx) > 3 else ""
            problems.append(
                f"stable ABI: the kernel declares torch's stable ABI {expect.stable_abi}, but "
                f"{so.path} calls {len(so.torch_cxx)} symbol(s) of torch's C++ outside it: "
                f"{shown}{more}; another torch may not have them (use the C shim, "
                "torch::stable and torch::headeronly)")
    return problems


def _check_metadata(report: WheelReport, expect: Expectation) -> list[str]:
    problems = []
    if canonicalize_name(report.name) != canonicalize_name(expect.name):
        problems.append(f"the filename names '{report.name}', not '{expect.name}'")
    if report.version != expect.version:
        problems.append(f"the filename's version is {report.version}, the cell's is "
                        f"{expect.version}")
    if report.metadata_name is None:
        problems.append("METADATA is missing or has no Name")
    elif canonicalize_name(report.metadata_name) != canonicalize_name(report.name):
        problems.append(f"METADATA names '{report.metadata_name}' but the filename "
                        f"'{report.name}'")
    if report.metadata_version != report.version:
        problems.append(f"METADATA's version {report.metadata_version} differs from the "
                        f"filename's {report.version}")
    if set(report.wheel_tags) != set(report.tags):
        problems.append(f"WHEEL's tags ({', '.join(report.wheel_tags) or 'none'}) differ from "
                        f"the filename's ({', '.join(report.tags)})")
    problems += list(report.record_problems)
    if expect.torch is not None and report.torch_requirement != expect.torch:
        problems.append(f"the torch requirement is {report.torch_requirement or 'missing'}, "
                        f"the cell's torch is torch{expect.torch}")
    return problems


def _check_abi3(report: WheelReport) -> list[str]:
    if not report.is_abi3:
        return []
    return [f"abi3: {so.path} {so.abi3.describe()}" for so in report.shared_objects
            if so.abi3 is not None and not so.abi3.ok]


def _check_manylinux(report: WheelReport) -> list[str]:
    problems = []
    for platform in report.platform_tags:
        glibc = tag_glibc(platform)
        if glibc is None:
            continue
        for so in report.shared_objects:
            if so.manylinux_glibc is None or so.manylinux_glibc > glibc:
                needs = [", ".join(f"{family}_{version}"
                                   for family, version in so.symbol_versions.items())]
                needs += [f"{library}'s {', '.join(symbols)}, which no manylinux policy allows"
                          for library, symbols in (so.blacklisted or {}).items()]
                problems.append(f"manylinux: the wheel is tagged {platform}, but {so.path} "
                                f"needs {so.manylinux} ({'; '.join(needs)})")
            if so.arch is not None and not platform.endswith("_" + so.arch):
                problems.append(f"manylinux: the wheel is tagged {platform}, but {so.path} "
                                f"is {so.arch} code")
    return problems


def _is_torch_library(name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in PROVIDED_BY_TORCH)


def _linked_by(report: WheelReport) -> str:
    """Which compiler the provenance says linked the wheel, and how to choose another."""
    toolchain = report.record.toolchain if report.record else {}
    compiler = toolchain.get("cxx")
    if compiler is None:
        return ""
    origin = toolchain.get("cxx_from")
    chosen = f" from {origin}" if origin is not None else ""
    return (f" (it was linked by {compiler}{chosen}; set CXX to a compiler that links "
            "libstdc++.so.6, e.g. CXX=/usr/bin/g++)")


def _check_libraries(report: WheelReport, expect: Expectation) -> list[str]:
    problems = []
    shipped = {PurePosixPath(so.path).name for so in report.shared_objects}
    for path in report.files:
        name = PurePosixPath(path).name
        if _is_torch_library(name) and ".so" in name:
            problems.append(f"libraries: the wheel bundles {path}, a copy of a library torch "
                            "provides; the user's own torch must supply it")
    arch = expect.arch or "x86_64"
    system = system_libraries(arch) | set(PROVIDED_BY_DRIVER) | {GLIBC_LOADERS[arch]}
    for so in report.shared_objects:
        if so.own_cxx_runtime:
            problems.append(f"libraries: {so.path} carries its own copy of libstdc++ (linked "
                            "statically, e.g. by a compiler wrapper's -static-libstdc++): a C++ "
                            "exception torch throws through it crashes the process; link "
                            f"libstdc++.so.6 as torch does{_linked_by(report)}")
        for needed in so.needed:
            if expect.cpu_only and _needs_cuda(needed):
                problems.append(f"libraries: {so.path} needs {needed}, a CUDA library, but it "
                                "is a CPU build: it must load with a CPU-only torch")
                continue
            cudart = _CUDART.fullmatch(needed)
            if cudart and expect.cuda_major is not None and int(cudart[1]) != expect.cuda_major:
                problems.append(f"libraries: {so.path} needs {needed}, but the cell is CUDA "
                                f"{expect.cuda_major}")
            elif needed in shipped and _is_torch_library(needed):
                continue  # reported above as a bundled copy
            elif not (needed in system or _is_torch_library(needed) or needed in shipped):
                problems.append(f"libraries: {so.path} needs {needed}, which neither the "
                                "system, nor torch, nor the wheel provides")
    return problems


def _needs_cuda(library: str) -> bool:
    """Whether a library exists only where CUDA does: torch's CUDA half, CUDA's own."""
    return library.startswith(("libc10_cuda", "libtorch_cuda", "libcuda", "libnv", "libcublas",
                               "libcudnn", "libcusparse", "libcufft", "libcurand", "libnccl",
                               "libcusolver", "libcupti"))


def _check_cubins(report: WheelReport, expect: Expectation) -> list[str]:
    if expect.cubins is None:
        return []
    if not report.cutile:
        return ["cubins: the wheel has no cuTile manifest (_kwf_cutile/manifest.json)"]
    found = {cubin.path: cubin.sm for cubin in report.cubins}
    problems = []
    for package, manifest in report.cutile:
        kernels = manifest.get("kernels")
        if not isinstance(kernels, dict) or not kernels:
            problems.append(f"cubins: {package}'s manifest lists no kernel")
            continue
        for key, entries in sorted(kernels.items()):
            for entry in entries:
                cubins = entry.get("cubins") or {}
                missing = sorted(expect.cubins - set(cubins), key=_sm_number)
                if missing:
                    problems.append(f"cubins: {key} {entry.get('symbol')} has no cubin for "
                                    f"{', '.join(missing)} (those GPUs would compile it at "
                                    "first launch, or fail without a toolkit)")
                for sm, path in sorted(cubins.items()):
                    member = f"{package}/_kwf_cutile/{path}"
                    if member not in found:
                        problems.append(f"cubins: {member} is listed but not a cubin in the "
                                        "wheel")
                    elif found[member] != sm:
                        problems.append(f"cubins: {member} is filed for {sm} but holds "
                                        f"{found[member]} code")
    return problems


def _sm_number(sm: str) -> int:
    return int("".join(ch for ch in sm if ch.isdigit()) or 0)


def _check_gpu_code(report: WheelReport, expect: Expectation) -> list[str]:
    problems = [f"GPU code: {so.path}: {so.gpu_error}" for so in report.shared_objects
                if so.gpu_error]
    if expect.gpu_code is None:
        return problems
    if expect.gpu_covers:
        with_code = [so for so in report.shared_objects if so.sass or so.ptx]
        if not with_code:
            problems.append("GPU code: no shared object of the wheel carries GPU code")
        for so in with_code:
            missing = sorted(expect.gpu_code - set(so.sass))
            if missing:
                problems.append(f"GPU code: {so.path} has no SASS for {', '.join(missing)} "
                                f"(it holds {' '.join((*so.sass, *so.ptx))}); those GPUs "
                                "would fail with 'no kernel image is available'")
        return problems
    found = {code for so in report.shared_objects for code in (*so.sass, *so.ptx)}
    missing_sass = sorted(c for c in expect.gpu_code - found if c.startswith("sm_"))
    missing_ptx = sorted(c for c in expect.gpu_code - found if c.startswith("compute_"))
    unexpected = sorted(found - expect.gpu_code)
    if missing_sass:
        problems.append(f"GPU code: no SASS for {', '.join(missing_sass)}, which the cell "
                        "promises (those GPUs would fail with 'no kernel image is available')")
    if missing_ptx:
        problems.append(f"GPU code: no PTX for {', '.join(missing_ptx)}")
    if unexpected:
        problems.append(f"GPU code: {', '.join(unexpected)} not planned for this cell (PTX "
                        "belongs only to the newest SM)")
    return problems

