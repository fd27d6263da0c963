"""Kernels that compile at run time ship what they compile against.

A kernel-builder package whose Python side compiles CUDA when it is first called (deep-gemm's
JIT runs nvcc over the headers under its package's include/ folder) needs, at that moment, the
headers of the C++ dependencies it was built against. The package looks for them beside its
own (deep-gemm: <package>/include/cutlass before any installed copy), so the wheel carries them
there: every header file of each dependency the cell compiled with, added under include/ where
the package has not put a file of its own (headers only; the wheel's deflate compresses them).

The gate: each header of the package's own under include/ is run through nvcc's preprocessor
for the cell's newest SM, with the wheel's include/ folder and the toolkit's own headers only,
as the run-time compiler would see them. A header that includes a file no folder has fails the
cell there, with the file named, instead of at a user's first call.
"""

from __future__ import annotations

import os
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .. import defaults
from ..errors import BuildError
from ..plan.model import HEADER_SUFFIXES, Cell
from ..system.process import Log, bounded_run
from ..toolchain import Toolchain
from ..values.units import human_size

__all__ = ["check_jit_headers", "ship_jit_headers"]

_MISSING = re.compile(r"fatal error: ([^\s:]+): No such file or directory")
_STANDARD = re.compile(r"^-std=(c\+\+\d+)$")


def _is_header(path: Path) -> bool:
    return path.suffix.lower() in HEADER_SUFFIXES


def jit_include(package: Path) -> Path | None:
    """The package's include/ folder when it ships headers for a run-time compiler."""
    folder = package / "include"
    if folder.is_dir() and any(_is_header(path) for path in folder.rglob("*")):
        return folder
    return None


def ship_jit_headers(cell: Cell, package: Path, log: Log) -> list[Path]:
    """Copy the headers of the cell's C++ dependencies into the package's include/ folder, when
    it has one; the package's own headers there (the ones the gate checks)."""
    folder = jit_include(package)
    if folder is None:
        return []
    own = sorted(path for path in folder.rglob("*") if _is_header(path))
    for dependency in cell.depends:
        added = size = 0
        for root in dependency.folders:
            for path in sorted(root.rglob("*")):
                if not path.is_file() or not _is_header(path):
                    continue
                target = folder / path.relative_to(root)
                if target.exists():
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)
                added += 1
                size += path.stat().st_size
        log.write(f"run-time compiler headers: {dependency.name} ({dependency.version}), {added} "
                  f"files, {human_size(size)} before compression, into "
                  f"{package.name}/include, where the package's JIT looks for them")
    return own


def check_jit_headers(cell: Cell, toolchain: Toolchain, package: Path, own: list[Path],
                      log: Log, threads: int) -> None:
    """Preprocess each of the package's own JIT headers against the wheel's include/ folder;
    BuildError naming the first file one of them includes and no folder has."""
    toolkit = toolchain.cuda
    if not own or toolkit is None or not cell.sms:
        return
    folder = package / "include"
    newest = max(cell.sms, key=lambda cap: (cap.major, cap.minor))
    flags = [flag for unit in cell.units for flag in unit.cuda_flags if _STANDARD.match(flag)]
    standard = flags[0] if flags else f"-std=c++{toolchain.cxx_std}"
    work = package.parent.parent / "jit-check"
    work.mkdir(parents=True, exist_ok=True)

    def preprocess(header: Path) -> tuple[Path, str | None]:
        relative = header.relative_to(folder).as_posix()
        unit = work / (re.sub(r"[^A-Za-z0-9]+", "_", relative) + ".cu")
        unit.write_text(f"#include <{relative}>\n")
        argv, cwd = toolchain.runs_in.argv(
            [str(toolkit.nvcc), "-E", "-x", "cu", standard, "--expt-relaxed-constexpr",
             f"-arch=sm_{newest.arch}", "-ccbin", toolchain.cxx, "-I", str(folder), "-o",
             os.devnull, str(unit)], work)
        done = bounded_run(argv, defaults.COMPILER_PROBE_TIMEOUT, defaults.LOG_OUTPUT_LIMIT,
                           cwd=cwd)
        missing = _MISSING.search(done.stdout + done.stderr)
        return header, missing[1] if missing else None

    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        results = list(pool.map(preprocess, own))
    failed = [(header, missing) for header, missing in results if missing]
    log.write(f"run-time compiler gate: {len(own) - len(failed)} of {len(own)} of the package's "
              f"headers preprocess with the wheel's include/ folder alone (sm_{newest.arch})")
    if failed:
        header, missing = failed[0]
        raise BuildError(f"{header.relative_to(folder).as_posix()} includes {missing}, which the "
                         "wheel does not carry: the kernel's run-time compiler would fail at its "
                         "first call (add the dependency that has it to the section's depends)")
