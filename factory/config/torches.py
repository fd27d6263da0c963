"""Torches already installed: the interpreter or container image a matrix's torch entry names,
as read once before planning (sources/installed.py). What is read decides the cell's label, its
torch pin and its import guard, and goes into its fingerprint, so a changed torch means a new
build.

Release builds (2.11.0, 2.11.0+cu130: what PyPI and PyTorch's indexes serve) are labelled and
pinned like index builds (cu130torch211, torch==2.11.*): the same release line has one C++ ABI.
Any other build (NVIDIA's 2.5.0a0+e000cf0ad9.nv24.10, a nightly, a source build) is bound to
exactly that build: its label gets a build tag (cu126torch25.nv2410; `nvYYMM` for NVIDIA's
container releases, else `t` and 8 hex digits of the version's sha256), its wheel requires
torch==<that version> and its import guard accepts only that version.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass
from typing import Any

from ..values.versions import Version, major_minor

__all__ = ["InstalledTorch", "build_tag", "is_release_build"]


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
    toolkit_seeds: bool = False  # whether its nvcc takes --frandom-seed
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
