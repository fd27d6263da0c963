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
import os
import platform
import time
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from . import __version__
from .errors import ConfigError
from .expect import expected_gpu_code
from .matrix.plan import Cell
from .process import first_output_line

SCHEMA = "kernel-wheel-factory/provenance/1"
DEFAULT_BUILD_ROOT = Path("/tmp/kernel-wheel-factory/build")


@dataclass(frozen=True)
class BuildOptions:
    """How cells are built, the same for every cell of a run."""

    build_root: Path  # a fixed path: nvcc writes the source's absolute path into the object
    source_date_epoch: int | None  # from the environment; else each source's own time
    builder: str | None = None  # the builder image, for builds in a container

    def epoch(self, cell: Cell) -> int:
        return self.source_date_epoch if self.source_date_epoch is not None else cell.source.epoch


def usable_build_root(path: Path, key: str = "--build-root") -> Path:
    """A build root: absolute (it is written into the objects) and usable by this user."""
    if not path.is_absolute():
        raise ConfigError("must be an absolute path (it is written into the build)", file=path,
                          key=key)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot be made ({exc.strerror}); pass {key} DIR", file=path,
                          key=key) from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(f"is not writable by this user (another user's builds?); pass {key} "
                          "DIR", file=path, key=key)
    return path


def provenance_record(cell: Cell, options: BuildOptions, toolchain: dict[str, str]) -> dict:
    epoch = options.epoch(cell)
    source = cell.source
    record = {
        "schema": SCHEMA,
        "factory": __version__,
        "kernel": {
            "name": cell.spec.name, "version": cell.version, "ops_namespace": cell.ops_namespace,
            "build_toml_sha256": hashlib.sha256(cell.spec.build_toml.read_bytes()).hexdigest(),
        },
        "source": {
            "kind": source.kind, "location": source.location, "tree_sha256": source.digest,
            "git": {"commit": source.git.commit, "dirty": source.git.dirty} if source.git else None,
        },
        "cell": cell_record(cell),
        "toolchain": toolchain,
        "build": {
            "root": str(options.build_root), "source_date_epoch": epoch,
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch)),
        },
    }
    if source.kind != "path":
        record["source"].update(revision=source.requested, subdir=source.subdir)
    if options.builder is not None:
        record["build"]["builder"] = options.builder
    return record


def cell_record(cell: Cell) -> dict:
    """The cell, as the provenance records it: enough to plan it again (see replan.py)."""
    cuda = cell.cuda
    return {
        "id": cell.id, "label": cell.label, "label_template": cell.label_template,
        "torch": str(cell.torch) if cell.torch else None,
        "cuda": str(cuda.version) if cuda else None,
        "sms": [str(sm) for sm in cuda.sms] if cuda else [],
        "ptx": cuda.ptx if cuda else False,
        "torch_index": cuda.torch_index if cuda else None,
        "cuda_home": str(cuda.home) if cuda and cuda.home else None,
        "platform": cell.platform,
        "gpu_code": sorted(str(entry) for entry in expected_gpu_code(cell)),
    }


def toolchain_facts(compiler: str | None = None, nvcc: str | None = None,
                    torch: str | None = None) -> dict[str, str]:
    """Versions of the tools whose output is in the wheel."""
    facts = {"python": platform.python_version(), "auditwheel": _package_version("auditwheel")}
    if compiler:
        facts["cxx"] = f"{compiler} {first_output_line([compiler, '-dumpfullversion'])}"
        facts["ld"] = first_output_line(["ld", "--version"])
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
            digest = hashlib.sha256(path.read_bytes()).digest()
            files[relative] = base64.b64encode(digest).decode()
    if cell.cuda is not None:
        backend = {"type": "cuda", "archs": [str(arch) for arch in cell.sms]}
    else:
        backend = {"type": spec.backends[0] if spec.backends else "cuda"}
    record = {
        "name": spec.name,
        "id": cell.ops_namespace,
        "version": spec.major_version if spec.major_version is not None
        else int(cell.version.split(".")[0]),
        "license": spec.license or "unknown",
        "python-depends": list(dict.fromkeys(
            spec.python_depends + (spec.cuda_python_depends if cell.cuda else ()))),
        "backend": backend,
        "digest": {"algorithm": "sha256", "files": files},
    }
    return (json.dumps(record, indent=2, sort_keys=True) + "\n").encode()


def _package_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "missing"
