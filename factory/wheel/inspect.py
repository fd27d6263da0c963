"""Read a wheel the way a careful user would: its name, version, tags and requirements; for
each shared object the GPU code it carries, the libraries it needs, the manylinux policy its
symbols allow and whether it keeps to Python's limited API; and the factory's records in it.

`WheelReport.to_json()` is the stable form `factory inspect --json` prints (see README).
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from email.parser import BytesParser
from pathlib import Path, PurePosixPath

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import (
    InvalidWheelFilename,
    canonicalize_name,
    parse_wheel_filename,
)

from ..errors import ConfigError
from .elf import NotAnElfFile, is_elf, read_linkage
from .fatbin import FatbinError, fatbin_entries
from .manylinux import ARCHITECTURES, judge_symbols

REPORT_SCHEMA = "kernel-wheel-factory/inspect/1"
PROVENANCE_FILE = "provenance.json"
KERNEL_METADATA_FILE = "metadata.json"


class WheelReadError(ConfigError):
    """The file is not a wheel the factory can read (bad input: exit status 2)."""


@dataclass(frozen=True)
class Abi3Verdict:
    ok: bool
    baseline: str | None  # the limited API version the tag promises, e.g. "3.9"
    computed: str | None  # the newest limited API version the symbols use
    non_abi3_symbols: tuple[str, ...]
    newer_symbols: tuple[tuple[str, str], ...]  # (symbol, limited API version that added it)
    error: str | None = None

    def describe(self) -> str:
        if self.error:
            return f"not checked: {self.error}"
        if self.ok:
            return f"abi3 {self.computed} ok"
        parts = []
        if self.non_abi3_symbols:
            parts.append("outside the limited API: " + ", ".join(self.non_abi3_symbols))
        if self.newer_symbols:
            parts.append(f"newer than {self.baseline}: "
                         + ", ".join(f"{name} ({added})" for name, added in self.newer_symbols))
        return "; ".join(parts)

    def to_json(self) -> dict:
        return {"ok": self.ok, "baseline": self.baseline, "computed": self.computed,
                "non_abi3_symbols": list(self.non_abi3_symbols),
                "newer_symbols": dict(self.newer_symbols), "error": self.error}


@dataclass(frozen=True)
class SharedObject:
    path: str  # inside the wheel
    arch: str | None  # x86_64, aarch64
    sass: tuple[str, ...]  # sm_90, sm_100a, ...
    ptx: tuple[str, ...]  # compute_100, ...
    needed: tuple[str, ...]
    runpaths: tuple[str, ...]
    symbol_versions: dict[str, str]  # newest needed per family: GLIBC -> 2.34
    manylinux: str  # the policy its symbols allow: manylinux_2_34, or linux
    manylinux_glibc: tuple[int, int] | None
    abi3: Abi3Verdict | None  # None: not a Python extension module
    gpu_error: str | None = None

    def to_json(self) -> dict:
        return {
            "path": self.path, "arch": self.arch, "sass": list(self.sass), "ptx": list(self.ptx),
            "needed": list(self.needed), "runpaths": list(self.runpaths),
            "symbol_versions": self.symbol_versions,
            "manylinux": self.manylinux, "abi3": self.abi3.to_json() if self.abi3 else None,
            "gpu_code_error": self.gpu_error,
        }


@dataclass(frozen=True)
class WheelReport:
    file: str
    sha256: str
    size: int
    name: str  # from the filename
    version: str  # from the filename
    label: str | None  # the local version label: cu130torch211
    tags: tuple[str, ...]  # from the filename, expanded
    metadata_name: str | None
    metadata_version: str | None
    requires_python: str | None
    requires: tuple[str, ...]
    torch_requirement: str | None  # the specifier of the torch requirement: ==2.11.*
    wheel_tags: tuple[str, ...]  # the Tag lines of WHEEL
    files: tuple[str, ...]
    record_problems: tuple[str, ...]
    shared_objects: tuple[SharedObject, ...]
    provenance: dict | None
    kernel_metadata: dict | None  # the package's metadata.json (kernel-builder's format)

    @property
    def is_pure(self) -> bool:
        return not self.shared_objects

    @property
    def platform_tags(self) -> tuple[str, ...]:
        return tuple(sorted({tag.split("-")[2] for tag in self.tags}))

    @property
    def sass(self) -> tuple[str, ...]:
        return tuple(sorted({sm for so in self.shared_objects for sm in so.sass}, key=_arch_key))

    @property
    def ptx(self) -> tuple[str, ...]:
        return tuple(sorted({sm for so in self.shared_objects for sm in so.ptx}, key=_arch_key))

    def to_json(self) -> dict:
        return {
            "file": self.file, "sha256": self.sha256, "size": self.size,
            "name": self.name, "version": self.version, "label": self.label,
            "tags": list(self.tags), "requires_python": self.requires_python,
            "requires": list(self.requires), "torch": self.torch_requirement,
            "metadata": {"name": self.metadata_name, "version": self.metadata_version,
                         "wheel_tags": list(self.wheel_tags)},
            "record_problems": list(self.record_problems),
            "sass": list(self.sass), "ptx": list(self.ptx),
            "shared_objects": [so.to_json() for so in self.shared_objects],
            "provenance": self.provenance, "kernel_metadata": self.kernel_metadata,
        }


def inspect_wheel(path: Path) -> WheelReport:
    try:
        name, version, _build, tags = parse_wheel_filename(path.name)
    except InvalidWheelFilename as exc:
        raise WheelReadError(f"not a wheel file name ({exc})", file=path) from None
    data = path.read_bytes()
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            contents = {info.filename: archive.read(info) for info in archive.infolist()
                        if not info.is_dir()}
    except (OSError, zipfile.BadZipFile) as exc:
        raise WheelReadError(f"cannot read the wheel ({exc})", file=path) from None
    dist_info = _dist_info_folder(path, contents)
    metadata = _read_headers(contents, f"{dist_info}/METADATA")
    requires = tuple(metadata.get_all("Requires-Dist") or ()) if metadata else ()
    wheel_file = _read_headers(contents, f"{dist_info}/WHEEL")
    objects = []
    abi3 = _abi3_verdicts(path, tags)
    with tempfile.TemporaryDirectory(prefix="kwf-inspect-") as scratch:
        for member, member_data in sorted(contents.items()):
            if not is_elf(member_data):
                continue
            extracted = Path(scratch) / member
            extracted.parent.mkdir(parents=True, exist_ok=True)
            extracted.write_bytes(member_data)
            objects.append(_shared_object(member, extracted, abi3))
    return WheelReport(
        file=path.name, sha256=hashlib.sha256(data).hexdigest(),
        size=len(data), name=str(name), version=str(version),
        label=version.local, tags=tuple(sorted(str(tag) for tag in tags)),
        metadata_name=metadata.get("Name") if metadata else None,
        metadata_version=metadata.get("Version") if metadata else None,
        requires_python=metadata.get("Requires-Python") if metadata else None,
        requires=requires, torch_requirement=torch_requirement(requires),
        wheel_tags=tuple(sorted(wheel_file.get_all("Tag") or ())) if wheel_file else (),
        files=tuple(sorted(contents)),
        record_problems=_record_problems(contents, f"{dist_info}/RECORD"),
        shared_objects=tuple(objects),
        provenance=_read_json(contents, f"{dist_info}/{PROVENANCE_FILE}"),
        kernel_metadata=_kernel_metadata(contents, metadata),
    )


def _dist_info_folder(path: Path, members: dict) -> str:
    folders = {PurePosixPath(name).parts[0] for name in members
               if PurePosixPath(name).parts[0].endswith(".dist-info")}
    if len(folders) != 1:
        raise WheelReadError(f"expected one .dist-info folder, found {len(folders)}: "
                             f"{', '.join(sorted(folders)) or 'none'}", file=path)
    return folders.pop()


def _read_headers(contents: dict[str, bytes], name: str):
    if name not in contents:
        return None
    return BytesParser().parsebytes(contents[name])


def _read_json(contents: dict[str, bytes], name: str) -> dict | None:
    if name not in contents:
        return None
    try:
        return json.loads(contents[name])
    except ValueError as exc:
        return {"error": f"{name} is not JSON: {exc}"}


def _kernel_metadata(contents: dict[str, bytes], metadata) -> dict | None:
    if metadata is None or not metadata.get("Name"):
        return None
    package = canonicalize_name(metadata["Name"]).replace("-", "_")
    return _read_json(contents, f"{package}/{KERNEL_METADATA_FILE}")


def torch_requirement(requires: tuple[str, ...]) -> str | None:
    for text in requires:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        if canonicalize_name(requirement.name) == "torch" and requirement.marker is None:
            return str(requirement.specifier) or "any"
    return None


def _record_problems(contents: dict[str, bytes], name: str) -> tuple[str, ...]:
    """What RECORD gets wrong: files it misses, lists without them, or hashes wrongly."""
    if name not in contents:
        return ("RECORD is missing",)
    problems = []
    listed = set()
    for line in contents[name].decode("utf-8", "replace").splitlines():
        if not line.strip():
            continue
        path, hash_field, _size = line.rsplit(",", 2)
        listed.add(path)
        if path == name:
            continue
        if path not in contents:
            problems.append(f"RECORD lists {path}, which the wheel lacks")
            continue
        algorithm, _, expected = hash_field.partition("=")
        if algorithm != "sha256":
            problems.append(f"RECORD hashes {path} with '{algorithm or 'nothing'}', not sha256")
            continue
        actual = base64.urlsafe_b64encode(
            hashlib.sha256(contents[path]).digest()).rstrip(b"=").decode()
        if actual != expected:
            problems.append(f"RECORD's sha256 of {path} does not match its content")
    problems += [f"{path} is not listed in RECORD" for path in sorted(set(contents) - listed)]
    return tuple(problems)


def _shared_object(member: str, extracted: Path, abi3: dict[str, Abi3Verdict]) -> SharedObject:
    try:
        linkage = read_linkage(extracted)
    except NotAnElfFile as exc:
        raise WheelReadError(str(exc), key=member) from None
    arch = ARCHITECTURES.get(linkage.machine)
    verdict = judge_symbols(linkage.version_needs, arch or "x86_64")
    gpu_error = None
    try:
        entries = fatbin_entries(extracted)
    except FatbinError as exc:
        entries, gpu_error = [], f"cannot read its GPU code: {exc}"
    return SharedObject(
        path=member, arch=arch,
        sass=tuple(str(e) for e in entries if e.kind == "sass"),
        ptx=tuple(str(e) for e in entries if e.kind == "ptx"),
        needed=linkage.needed, runpaths=linkage.runpaths, symbol_versions=verdict.newest,
        manylinux=verdict.policy.name, manylinux_glibc=verdict.policy.glibc,
        abi3=abi3.get(PurePosixPath(member).name)
        or (abi3.get("*") if member.endswith(".abi3.so") else None),
        gpu_error=gpu_error,
    )


def _abi3_verdicts(path: Path, tags) -> dict[str, Abi3Verdict]:
    """abi3audit's verdict for each extension module, by file name; nothing unless the wheel
    is tagged abi3."""
    if not any(tag.abi == "abi3" for tag in tags):
        return {}
    baseline = next(tag.interpreter for tag in tags if tag.abi == "abi3")
    done = subprocess.run([sys.executable, "-m", "abi3audit", "--report", path],
                          capture_output=True, text=True)
    try:
        report = json.loads(done.stdout)["specs"][str(path)]["wheel"]
    except (ValueError, KeyError, TypeError):
        error = (done.stderr.strip().splitlines() or ["no report"])[-1]
        version = f"{baseline[2]}.{baseline[3:]}"
        return {"*": Abi3Verdict(False, version, None, (), (), f"abi3audit failed: {error}")}
    verdicts = {}
    for entry in report:
        result = entry["result"]
        newer = tuple(sorted(result.get("future_abi3_objects", {}).items()))
        verdicts[entry["name"]] = Abi3Verdict(
            ok=bool(result["is_abi3"] and result["is_abi3_baseline_compatible"]),
            baseline=result["baseline"], computed=result["computed"],
            non_abi3_symbols=tuple(sorted(result["non_abi3_symbols"])), newer_symbols=newer,
        )
    return verdicts


def _arch_key(arch: str) -> tuple[int, str]:
    number = arch.split("_")[1]
    digits = "".join(ch for ch in number if ch.isdigit())
    return int(digits or 0), number
