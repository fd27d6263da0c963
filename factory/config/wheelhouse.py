"""Wheelhouses: folders of wheels that test environments are installed from (with or without a
network), checked before anything is built: a folder, holding wheels, each one whole (a zip
whose .dist-info/METADATA names the project and version its file name says)."""

from __future__ import annotations

import hashlib
import zipfile
from email.parser import HeaderParser
from pathlib import Path

from packaging.utils import (
    InvalidWheelFilename,
    canonicalize_name,
    canonicalize_version,
    parse_wheel_filename,
)

__all__ = ["wheelhouse_digest", "wheelhouse_problem", "wheelhouse_wheels"]

_METADATA_LIMIT = 4 * 2**20  # bytes: a METADATA file is a few KiB


def wheelhouse_wheels(folder: Path) -> list[Path]:
    """The wheel files of a wheelhouse (its top level, as uv's --find-links reads it)."""
    return sorted(path for path in folder.iterdir() if path.name.endswith(".whl"))


def wheelhouse_digest(folder: Path) -> str:
    """sha256 of a wheelhouse's wheels, each by name and content: what the lock keeps of it."""
    digest = hashlib.sha256()
    for wheel in wheelhouse_wheels(folder):
        with open(wheel, "rb") as handle:
            digest.update(f"{wheel.name} {hashlib.file_digest(handle, 'sha256').hexdigest()}\n"
                          .encode())
    return digest.hexdigest()


def wheelhouse_problem(folder: Path) -> str | None:
    """What makes `folder` no wheelhouse, in words that end a sentence about it; None when it
    is one."""
    if not folder.exists():
        return "does not exist"
    if not folder.is_dir():
        return "is not a folder (a wheelhouse is a folder of .whl files)"
    try:
        wheels = wheelhouse_wheels(folder)
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if not wheels:
        return "holds no wheel (.whl files at its top level); `factory wheelhouse MATRIX DIR` " \
               "makes one"
    for wheel in wheels:
        problem = _wheel_problem(wheel)
        if problem is not None:
            return f"holds a damaged wheel, {wheel.name}: {problem}"
    return None


def _wheel_problem(wheel: Path) -> str | None:
    try:
        name, version, _, _ = parse_wheel_filename(wheel.name)
    except InvalidWheelFilename as exc:
        return f"not a wheel's file name ({exc})"
    if not wheel.is_file():
        return "not a file"
    try:
        with zipfile.ZipFile(wheel) as archive:
            found = [info for info in archive.infolist()
                     if info.filename.count("/") == 1
                     and info.filename.endswith(".dist-info/METADATA")]
            if len(found) != 1:
                return "no .dist-info/METADATA in it"
            if found[0].file_size > _METADATA_LIMIT:
                return "its METADATA is too large"
            headers = HeaderParser().parsestr(
                archive.read(found[0]).decode("utf-8", errors="replace"))
    except (OSError, zipfile.BadZipFile, zipfile.LargeZipFile, ValueError) as exc:
        return f"not a readable zip file ({exc})"
    stated = (canonicalize_name(headers.get("Name") or ""),
              canonicalize_version(headers.get("Version") or "", strip_trailing_zero=False))
    if stated != (name, canonicalize_version(version, strip_trailing_zero=False)):
        return (f"its METADATA names {headers.get('Name')} {headers.get('Version')}, its file "
                f"name {name} {version}")
    return None
