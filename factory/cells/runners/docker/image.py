"""Builder images: which image a cell is built in, and how it is made.

One image per CUDA version and platform, on a base (pypa's manylinux_2_28 by default). The
image's name carries the CUDA version, the platform, the factory's version and a digest of
everything that goes into it (the Dockerfile, the install script, the pinned dependencies, the
factory's own package and the build args), so a changed factory never runs in a stale image.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import ssl
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

from .... import __version__
from ....policy import cuda_policy
from ....toolchain.cuda import PYPI_TOOLKIT
from ....values.versions import Version, major_minor

__all__ = ["PACKAGE", "BuilderImage", "build_context", "builder_image", "context_digest",
           "requirements", "slug"]

DOCKERFILE = "builder.Dockerfile"
PACKAGE = Path(__file__).resolve().parents[3]
DOCKER_FILES = PACKAGE / "data" / "docker"
DISTRIBUTION = "kernel-wheel-factory"
# Where the base keeps the CPython the factory runs on (a manylinux image's layout).
PYTHON = "/opt/python/cp311-cp311/bin/python3.11"
MANYLINUX_GCC = 14  # the gcc major of manylinux_2_28's devtoolset


@dataclass(frozen=True)
class BuilderImage:
    cuda: Version  # major.minor
    platform: str
    base: str
    build_args: tuple[tuple[str, str], ...]
    digest: str  # of the build context and args

    @property
    def repository(self) -> str:
        return f"kernel-wheel-factory/builder-cu{self.cuda}-{self.platform}"

    @property
    def tag(self) -> str:
        """Short, for container names."""
        return f"cu{self.cuda}-{self.platform}"

    @property
    def name(self) -> str:
        return f"{self.repository}:{__version__}-{self.digest[:12]}"


def base_image(template: str, platform: str) -> str:
    """The base image of a platform from the settled template ({arch}: the platform)."""
    return template.replace("{arch}", platform)


def gcc_toolset(cuda: Version) -> str:
    """A gcc-toolset whose g++ this nvcc accepts, where manylinux_2_28's default (gcc 14) is
    too new for it (factory/data/cuda.toml's max-gcc)."""
    policy = cuda_policy(cuda)
    if policy is None or policy.max_gcc >= MANYLINUX_GCC:
        return ""
    return str(policy.max_gcc)


def cuda_packages(cuda: Version) -> str:
    """The PyPI wheels of the toolkit, for versions NVIDIA publishes there."""
    policy = cuda_policy(cuda)
    if policy is None or not policy.pypi:
        return ""
    return " ".join(f"{name}=={cuda}.*" for name in PYPI_TOOLKIT)


def builder_image(cuda: Version, platform: str, base_template: str) -> BuilderImage:
    cuda = major_minor(cuda)
    base = base_image(base_template, platform)
    args = (("BASE", base), ("CUDA_VERSION", str(cuda)), ("CUDA_PACKAGES", cuda_packages(cuda)),
            ("GCC_TOOLSET", gcc_toolset(cuda)), ("PYTHON", PYTHON))
    digest = hashlib.sha256(repr(args).encode() + context_digest().encode()).hexdigest()
    return BuilderImage(cuda, platform, base, args, digest)


def requirements() -> list[str]:
    """The factory's own dependencies, pinned to the versions running here."""
    pinned = []
    for text in metadata.requires(DISTRIBUTION) or []:
        requirement = Requirement(text)
        if requirement.marker is not None and "extra" in str(requirement.marker):
            continue
        pinned.append(f"{requirement.name}=={metadata.version(requirement.name)}")
    return sorted(pinned, key=str.lower)


def _package_files() -> list[Path]:
    """The factory's package, as it goes into the image (its Dockerfiles left out)."""
    files = []
    for path in PACKAGE.rglob("*"):
        relative = path.relative_to(PACKAGE)
        if relative.parts[:2] == ("data", "docker") or "__pycache__" in relative.parts:
            continue
        if path.is_file() and path.suffix != ".pyc":
            files.append(relative)
    return sorted(files)


@cache
def context_digest() -> str:
    digest = hashlib.sha256()
    for name, data in _context_files():
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return digest.hexdigest()


def host_certificates() -> bytes:
    """The CA certificates this machine trusts (where a TLS proxy's own would be)."""
    paths = ssl.get_default_verify_paths()
    for candidate in (os.environ.get("SSL_CERT_FILE"), os.environ.get("PIP_CERT"),
                      os.environ.get("REQUESTS_CA_BUNDLE"), paths.cafile, paths.openssl_cafile):
        if candidate and Path(candidate).is_file():
            return Path(candidate).read_bytes()
    return b""


def _context_files() -> Iterator[tuple[str, bytes]]:
    for name in (DOCKERFILE, "install-cuda.sh"):
        yield name, (DOCKER_FILES / name).read_bytes()
    yield "requirements.txt", ("\n".join(requirements()) + "\n").encode()
    yield "host-ca-certificates.crt", host_certificates()
    for relative in _package_files():
        yield f"factory/{relative.as_posix()}", (PACKAGE / relative).read_bytes()


@contextmanager
def build_context() -> Iterator[Path]:
    """A temporary folder holding the image's build context."""
    folder = Path(tempfile.mkdtemp(prefix="kwf-image-"))
    try:
        for name, data in _context_files():
            target = folder / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        (folder / "install-cuda.sh").chmod(0o755)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def slug(text: str) -> str:
    """An image name as a folder name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")
