"""The records a wheel carries about its own making.

- `provenance.json` in the .dist-info folder: the source (where, which tree, which commit), the
  build.toml digest, the cell, the toolchain, the factory version and the build's time. It holds
  everything `factory verify` needs to build the same wheel again, and nothing that differs
  between two builds of the same inputs (no wall-clock time, no output folder, no user's home):
  its time is the source's time (SOURCE_DATE_EPOCH), the same one the zip entries carry.
- `metadata.json` in the package folder, in kernel-builder's format, so the `kernels` loader can
  load the installed package folder as a kernel variant.
"""

from __future__ import annotations

import base64
import hashlib
import json
import platform
import time
from collections.abc import Callable
from dataclasses import replace
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from .. import __version__, defaults
from ..outputs.files import file_sha256
from ..plan.codec import cell_record
from ..plan.model import Cell
from ..system.process import first_output_line
from ..wheel.fatbin import fatbin_sizes, summed
from ..wheel.provenance import BuildFacts, GitFacts, KernelFacts, Provenance, SourceFacts
from .options import BuildOptions

__all__ = ["gpu_code_sizes", "kernel_metadata", "provenance_file", "provenance_record",
           "toolchain_facts"]

def provenance_record(cell: Cell, options: BuildOptions,
                      toolchain: dict[str, str]) -> Provenance:
    epoch = options.epoch(cell)
    source = cell.source
    fetched = source.kind != "path"
    return Provenance(
        __version__,
        KernelFacts(cell.spec.name, cell.version, cell.ops_namespace,
                    file_sha256(cell.spec.build_toml),
                    _project_file(cell)),
        SourceFacts(source.kind, source.location, source.digest,
                    GitFacts(source.git.commit, source.git.dirty) if source.git else None,
                    source.requested if fetched else None, source.subdir if fetched else None),
        _without_values(cell_record(cell)), toolchain,
        BuildFacts(str(options.build_root), epoch,
                   time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch)),
                   options.builder, options.index_url))


def _project_file(cell: Cell) -> str | None:
    """The file a project that is not a build.toml repo was read from (setup.py or
    pyproject.toml), as provenance names it."""
    name = cell.spec.build_toml.name
    return None if name == "build.toml" else name


def _without_values(record: dict[str, Any]) -> dict[str, Any]:
    """A cell record whose build variables (the matrix's env:, which may hold a token) are
    named, each value only by its sha256: `factory verify` takes the values from its own
    environment and checks them against these."""
    env = record.get("env")
    if not env:
        return record
    return {**record, "env": {name: {"sha256": hashlib.sha256(str(value).encode()).hexdigest()}
                              for name, value in env.items()}}


def provenance_file(cell: Cell, options: BuildOptions, toolchain: dict[str, str],
                    content: Path, gpu_code_found: dict[str, list[str]] | None = None) -> bytes:
    """provenance.json's bytes: the cell's record, with the GPU code a project that chose its
    own archs was found to hold, and the bytes of each kind of GPU code the shared objects under
    `content` (the wheel's files) carry. A cell of a record made before compression was a
    setting (and sizes were recorded) is rebuilt without them, so that `factory verify` gives
    its bytes again."""
    record = replace(provenance_record(cell, options, toolchain),
                     gpu_code_sizes=gpu_code_sizes(content) if cell.compress is not None
                     else None, gpu_code_found=gpu_code_found)
    return (json.dumps(record.to_json(), indent=2, sort_keys=True) + "\n").encode()


def gpu_code_sizes(content: Path) -> dict[str, list[int]]:
    """sm_90 -> [bytes stored, bytes once inflated], over every shared object under `content`."""
    total = summed(item for path in sorted(content.rglob("*.so*"))
                   if path.is_file() and not path.is_symlink()
                   for item in fatbin_sizes(path).items())
    return {str(entry): [size.stored, size.inflated] for entry, size in total.items()}


def toolchain_facts(compiler: str | None = None, nvcc: str | None = None,
                    torch: str | None = None,
                    ask: Callable[[list[str]], str] = first_output_line,
                    compiler_origin: str = "") -> dict[str, str]:
    """Versions of the tools whose output is in the wheel, and what chose the compiler; `ask`
    runs a tool where the build ran (this machine, or a container) and gives the first line
    it prints."""
    facts = {"python": platform.python_version(), "auditwheel": _package_version("auditwheel")}
    if compiler:
        facts["cxx"] = f"{compiler} {ask([compiler, '-dumpfullversion'])}"
        # the linker the compiler drives (a cross compiler's is its own)
        facts["ld"] = ask([ask([compiler, "-print-prog-name=ld"]) or "ld", "--version"])
    if compiler_origin:
        facts["cxx_from"] = compiler_origin
    if nvcc:
        facts["nvcc"] = nvcc
    if torch:
        facts["torch"] = torch
    return facts


def kernel_metadata(cell: Cell, package: Path) -> bytes:
    """kernel-builder's metadata.json for the package folder, with the digest of its files."""
    spec = cell.spec
    files = {}
    for path in sorted(package.rglob("*")):
        relative = path.relative_to(package).as_posix()
        if path.is_file() and relative != "metadata.json":
            with open(path, "rb") as handle:
                digest = hashlib.file_digest(handle, "sha256").digest()
            files[relative] = base64.b64encode(digest).decode()
    if cell.cuda is not None:
        backend = {"type": "cuda", "archs": [str(arch) for arch in cell.sms]}
    elif cell.compiled:
        backend = {"type": "cpu"}
    else:
        backend = {"type": spec.backends[0] if spec.backends else "cuda"}
        declared = spec.noarch.cuda_capabilities if spec.noarch else ()
        if backend["type"] == "cuda" and declared:  # the loader checks the GPU against them
            backend["archs"] = [str(arch) for arch in declared]
    depends = spec.kernel_depends_for(str(backend["type"]))
    source = spec.source_url or _source_url(cell)
    record = {
        "name": spec.name,
        "id": cell.ops_namespace,
        "version": spec.major_version if spec.major_version is not None
        else int(cell.version.split(".")[0]),
        "kernels-minver": defaults.KERNELS_MINVER,
        "license": spec.license or "unknown",
        **({"upstream": spec.upstream} if spec.upstream else {}),
        **({"source": source} if source else {}),
        "python-depends": list(dict.fromkeys(
            spec.python_depends + (spec.cuda_python_depends if cell.cuda else ()))),
        "kernel-depends": [{"repo-id": depend.repo_id,
                            **({"version": depend.version} if depend.version is not None
                               else {"revision": depend.revision})} for depend in depends],
        "backend": backend,
        "digest": {"algorithm": "sha256", "files": files},
        "provenance": _kernel_provenance(cell),
    }
    return (json.dumps(record, indent=2, sort_keys=True) + "\n").encode()


def _source_url(cell: Cell) -> str | None:
    """Where the kernel was built from, as a URL anyone can open: its git repository, or its
    Hub repo (a folder on this machine is no one else's)."""
    source = cell.source
    if source.kind == "git":
        return source.location
    if source.kind == "hub":
        return f"{defaults.HUB_URL}/{source.location}"
    return None


def _kernel_provenance(cell: Cell) -> dict[str, Any]:
    """The loader's provenance: what built the variant (the factory, in place of
    kernel-builder) and the kernel's commit with whether its tree had changes no commit holds
    (the loader warns of a dirty tree). A plain folder has no commit to name."""
    source = cell.source
    record: dict[str, Any] = {"kernel-builder": {"version": f"kernel-wheel-factory "
                                                            f"{__version__}"}}
    if source.kind in ("git", "hub"):
        record["kernel"] = {"commit": source.revision, "dirty": False}
    elif source.git is not None:
        record["kernel"] = {"commit": source.git.commit, "dirty": source.git.dirty}
    return record


def _package_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "missing"
