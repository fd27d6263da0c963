"""Write a wheel: core metadata, WHEEL, RECORD, and a zip whose bytes depend only on its content.

Entries are sorted, every timestamp is the one given (the source's time, or SOURCE_DATE_EPOCH)
and permissions are normalised, so the same files always give the same wheel.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import re
import time
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.metadata import Metadata
from packaging.tags import parse_tag
from packaging.utils import canonicalize_name, parse_wheel_filename

from .. import __version__
from ..outputs.files import ZIP_EPOCH

__all__ = ["CoreMetadata", "GivenMetadata", "compressed_tag", "dist_info_name", "record_hash",
           "relabelled", "wheel_filename", "wheel_name", "write_wheel"]


@dataclass(frozen=True)
class CoreMetadata:
    name: str
    version: str
    summary: str
    requires_python: str
    requires: tuple[str, ...]
    license: str | None
    readme: str | None  # Markdown

    def render(self) -> bytes:
        expression = self.license and _is_license_expression(self.license)
        lines = [
            f"Metadata-Version: {'2.4' if expression else '2.1'}",
            f"Name: {self.name}",
            f"Version: {self.version}",
            f"Summary: {self.summary}",
        ]
        if self.license:
            lines.append(f"License-Expression: {self.license}" if expression
                         else f"License: {self.license}")
        lines.append(f"Requires-Python: {self.requires_python}")
        lines += [f"Requires-Dist: {requirement}" for requirement in self.requires]
        if self.readme:
            lines.append("Description-Content-Type: text/markdown")
        text = "\n".join(lines) + "\n"
        if self.readme:
            text += "\n" + self.readme
        data = text.encode("utf-8")
        Metadata.from_email(data, validate=True)  # refuse to write metadata installers reject
        return data


@dataclass(frozen=True)
class GivenMetadata:
    """METADATA a build backend wrote, as the factory re-issues it (see relabelled)."""

    name: str
    version: str
    data: bytes
    project: str = ""  # the name the build backend gave, where `name` renames it

    def render(self) -> bytes:
        Metadata.from_email(self.data, validate=True)
        return self.data


def relabelled(data: bytes, version: str, torch: str, name: str | None = None,
               replace: Mapping[str, str] | None = None) -> GivenMetadata:
    """A build backend's METADATA with the factory's version and torch pin: Version replaced,
    every unconditional torch requirement replaced by `torch` (e.g. torch==2.11.*), the rest
    (description, classifiers, other requirements, markers) kept as written; with `name`, the
    Name too (dist-name); `replace` gives, by project name, the requirement that stands for
    every unconditional requirement of that project (cuda-tile's release range). Written here
    because packaging reads core metadata but has no writer that keeps a document as it is."""
    replaced: dict[str, str] = {canonicalize_name(project): text
                                for project, text in (replace or {}).items()}
    text = data.decode("utf-8")
    head, blank, body = text.partition("\n\n")
    fields: list[list[str]] = []  # each field with its continuation lines
    for line in head.split("\n"):
        if line[:1] in (" ", "\t") and fields:
            fields[-1].append(line)
        elif line:
            fields.append([line])
    kept: list[list[str]] = []
    project = None
    for field in fields:
        key, _, value = field[0].partition(":")
        key, value = key.strip().lower(), value.strip()
        if key == "name":
            project = value
            if name is not None:
                field = [f"Name: {name}"]
        if key == "version":
            field = [f"Version: {version}"]
        elif key == "requires-dist" and _unconditional_torch(value):
            continue
        elif key == "requires-dist" and (project_of := _unconditional(value)) in replaced:
            field = [f"Requires-Dist: {replaced[project_of]}"]
        kept.append(field)
    where = max((i + 1 for i, field in enumerate(kept)
                 if field[0].lower().startswith(("requires-dist:", "requires-python:",
                                                 "version:"))), default=len(kept))
    kept.insert(where, [f"Requires-Dist: {torch}"])
    if project is None:
        raise ValueError("METADATA has no Name")
    rendered = "\n".join(line for field in kept for line in field)
    rendered += "\n\n" + body if blank else "\n"
    return GivenMetadata(name or project, version, rendered.encode(), project)


def _unconditional(requirement: str) -> str | None:
    """The project an unconditional requirement names (canonical), else None."""
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        parsed = Requirement(requirement)
    except InvalidRequirement:
        return None
    return canonicalize_name(parsed.name) if parsed.marker is None else None


def _unconditional_torch(requirement: str) -> bool:
    return _unconditional(requirement) == "torch"


def _is_license_expression(text: str) -> bool:
    from packaging.licenses import (
        InvalidLicenseExpression,
        canonicalize_license_expression,
    )

    try:
        return canonicalize_license_expression(text) == text
    except InvalidLicenseExpression:
        return False


def wheel_name(name: str) -> str:
    """The distribution name as wheel filenames spell it: img2gray, tinygrad_rms."""
    return re.sub(r"[-_.]+", "_", canonicalize_name(name))


def wheel_filename(name: str, version: str, tag: str) -> str:
    return f"{wheel_name(name)}-{version}-{tag}.whl"


def compressed_tag(filename: str) -> str:
    """A wheel filename's tag set as written (cp39-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64),
    after packaging has checked the name: the last three dash-separated fields of a wheel name
    are its tags, whatever the order of the compressed platforms."""
    parse_wheel_filename(filename)
    return "-".join(filename.removesuffix(".whl").rsplit("-", 3)[1:])


def dist_info_name(name: str, version: str) -> str:
    return f"{wheel_name(name)}-{version}.dist-info"


def write_wheel(content: Path, dist: Path, metadata: CoreMetadata | GivenMetadata, tag: str,
                purelib: bool,
                epoch: int, extra_dist_info: dict[str, bytes] | None = None) -> Path:
    """Zip the files under `content` (the package folders) into a wheel in `dist`.

    `tag` may be a compressed tag set (cp39-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64);
    WHEEL lists each tag it stands for. `extra_dist_info` adds files to the .dist-info folder.
    """
    files = sorted((p for p in content.rglob("*") if p.is_file()),
                   key=lambda p: p.relative_to(content).as_posix())
    dist_info = dist_info_name(metadata.name, metadata.version)
    tag_lines = "".join(f"Tag: {t}\n" for t in sorted(str(t) for t in parse_tag(tag)))
    generated = {
        f"{dist_info}/METADATA": metadata.render(),
        f"{dist_info}/WHEEL": (
            f"Wheel-Version: 1.0\nGenerator: kernel-wheel-factory {__version__}\n"
            f"Root-Is-Purelib: {'true' if purelib else 'false'}\n{tag_lines}").encode(),
        **{f"{dist_info}/{name}": data for name, data in sorted((extra_dist_info or {}).items())},
    }
    dist.mkdir(parents=True, exist_ok=True)
    target = dist / wheel_filename(metadata.name, metadata.version, tag)
    record = io.StringIO()
    rows = csv.writer(record, lineterminator="\n")  # RECORD is CSV: a name with a comma is quoted
    timestamp = time.gmtime(max(ZIP_EPOCH, epoch))
    with zipfile.ZipFile(target, "w") as archive:
        def entry(name: str, size: int, executable: bool = False) -> zipfile.ZipInfo:
            info = zipfile.ZipInfo(name, date_time=timestamp[:6])
            info.external_attr = (0o100755 if executable else 0o100644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            # known before writing: zipfile then gives a member over 4 GiB its zip64 fields
            info.file_size = size
            return info

        for path in files:
            name = path.relative_to(content).as_posix()
            stat = path.stat()
            digest = hashlib.sha256()
            # streamed in chunks (the same bytes as writing it whole): a shared object of
            # several GiB is never held in memory
            with open(path, "rb") as source, \
                    archive.open(entry(name, stat.st_size, bool(stat.st_mode & 0o111)),
                                 "w") as target_member:
                while chunk := source.read(_CHUNK):
                    digest.update(chunk)
                    target_member.write(chunk)
            rows.writerow(_record_row(name, digest, stat.st_size))
        for name, data in generated.items():
            archive.writestr(entry(name, len(data)), data)
            rows.writerow(_record_row(name, hashlib.sha256(data), len(data)))
        rows.writerow((f"{dist_info}/RECORD", "", ""))
        data = record.getvalue().encode()
        archive.writestr(entry(f"{dist_info}/RECORD", len(data)), data)
    return target


_CHUNK = 1 << 24


def _record_row(name: str, digest: Any, size: int) -> tuple[str, str, int]:
    return name, record_hash(digest), size


def record_hash(digest: Any) -> str:
    """A sha256 as RECORD writes it: sha256=<urlsafe base64, unpadded>."""
    return "sha256=" + base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()
