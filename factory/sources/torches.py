"""torch: {latest: N}: the newest torch releases a package index lists, each with the CUDA
version of its build there.

The index is read with pypi-simple (PEP 691 JSON or PEP 503 HTML). A release's CUDA version is
its versions' local label where the index has one (download.pytorch.org's +cu130), else what
its Linux x86_64 wheel requires (PyPI's torch pins `cuda-toolkit==13.0.2`, or
`nvidia-cuda-runtime-cu12==12.8.90` before CUDA 13), read from the wheel's PEP 658 metadata
file, else the factory's own table of PyPI's builds.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion
from packaging.version import Version as PackagingVersion

from .. import defaults
from ..config.model import LatestTorch, ResolvedTorch
from ..errors import SourceError
from ..policy import torch_release
from ..values.versions import Version
from .simple import read_failures, shown

if TYPE_CHECKING:  # imported where used: only a matrix with torch: {latest: N} reads an index
    from pypi_simple import DistributionPackage, PyPISimple

__all__ = ["cuda_of_requirements", "newest_torches", "wheel_pythons"]

_RUNTIME = re.compile(r"cuda-toolkit|nvidia-cuda-runtime(-cu\d+)?")
_LABEL = re.compile(r"cu(\d+)(\d)")
_CPYTHON_ABI = re.compile(r"cp(\d{2,3})(t?)")


def cuda_of_requirements(requirements: list[str]) -> Version | None:
    """The CUDA major.minor a torch wheel's Requires-Dist pins its runtime to."""
    for text in requirements:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        if not _RUNTIME.fullmatch(requirement.name.lower()):
            continue
        for specifier in requirement.specifier:
            if specifier.operator in ("==", "===", "~=", ">="):
                try:
                    release = PackagingVersion(specifier.version.rstrip(".*")).release
                except InvalidVersion:
                    continue
                if len(release) >= 2:
                    return Version(f"{release[0]}.{release[1]}")
    return None


def wheel_pythons(filenames: Iterable[str]) -> tuple[str, ...]:
    """The CPythons Linux wheels named `filenames` are for: 3.14 for cp314, 3.14t for cp314t
    (free-threaded), in version order."""
    found = set()
    for filename in filenames:
        try:
            _, _, _, tags = parse_wheel_filename(filename)
        except InvalidWheelFilename:
            continue
        for tag in tags:
            abi = _CPYTHON_ABI.fullmatch(tag.abi)
            if abi and tag.platform.startswith(("linux", "manylinux")):
                found.add((int(abi[1][0]), int(abi[1][1:]), abi[2]))
    return tuple(f"{major}.{minor}{free}" for major, minor, free in sorted(found))


def newest_torches(latest: LatestTorch, say: Callable[[str], None]) -> list[ResolvedTorch]:
    """The `latest.count` newest torch releases (major.minor) `latest.index` lists, newest
    first, release candidates only with `latest.pre`."""
    from pypi_simple import NoSuchProjectError, PyPISimple

    from .http import BoundedSession

    try:
        with BoundedSession(defaults.INDEX_DEADLINE) as session, \
                PyPISimple(endpoint=latest.index, session=session) as index:
            try:
                page = index.get_project_page("torch", timeout=defaults.DOWNLOAD_TIMEOUT)
            except NoSuchProjectError:
                raise SourceError(f"{latest.index} lists no torch") from None
            newest: dict[Version, tuple[PackagingVersion, list[DistributionPackage]]] = {}
            for package in page.packages:
                if package.package_type != "wheel" or package.version is None:
                    continue
                try:
                    version = PackagingVersion(package.version)
                except InvalidVersion:
                    continue
                if version.is_devrelease or (version.is_prerelease and not latest.pre):
                    continue
                release = Version(f"{version.release[0]}.{version.release[1]}")
                best = newest.get(release)
                if best is None or version > best[0]:
                    newest[release] = (version, [package])
                elif version == best[0]:
                    best[1].append(package)
            chosen = sorted(newest, reverse=True)[:latest.count]
            if not chosen:
                raise SourceError(f"{latest.index} lists no torch release"
                                  f"{'' if latest.pre else ' (release candidates left out)'}")
            found = []
            for release in chosen:
                version, packages = newest[release]
                found.append(ResolvedTorch(release, str(version),
                                           _cuda(index, release, version, packages, latest),
                                           wheel_pythons(package.filename
                                                         for package in packages)))
    except read_failures() as exc:
        raise SourceError(f"cannot read the torch releases of {latest.index}: "
                          f"{type(exc).__name__}: {shown(exc)}") from None
    say(f"torch: latest {latest.count} on {latest.index}: " + ", ".join(
        f"{found.version} (CUDA {found.cuda}, CPython {' '.join(found.pythons) or 'unknown'})"
        for found in found))
    return found


def _cuda(index: PyPISimple, release: Version, version: PackagingVersion,
          packages: list[DistributionPackage], latest: LatestTorch) -> Version:
    label = _LABEL.fullmatch(version.local or "")
    if label:
        return Version(f"{label[1]}.{label[2]}")
    linux = [package for package in packages if package.filename.endswith("_x86_64.whl")
             and "linux" in package.filename and package.has_metadata]
    if linux:
        from email.parser import HeaderParser

        metadata = HeaderParser().parsestr(index.get_package_metadata(
            linux[0], timeout=defaults.DOWNLOAD_TIMEOUT))
        cuda = cuda_of_requirements(metadata.get_all("Requires-Dist") or [])
        if cuda is not None:
            return cuda
    known = torch_release(release)
    if known is not None:
        return known.pypi_cuda
    raise SourceError(f"cannot tell which CUDA version torch {version} on {latest.index} is "
                      "built with (no CUDA label, no metadata naming its runtime, and a release "
                      "newer than this factory knows)")
