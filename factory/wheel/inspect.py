"""Inspect a wheel the way a careful user would: its name, version, tags and requirements; for
each shared object the GPU code it carries, the libraries it needs, the manylinux policy its
symbols allow and whether it keeps to Python's limited API; and the factory's records in it.

A wheel is read, unzipped and hashed once (read.py): the report the gates judge holds the
WheelFile of that read, so a build hands its wheel's facts on instead of reading it again.
`WheelReport.to_json()` is the stable form `factory inspect --json` prints (see
docs/reference/commands.md).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import sys
import tempfile
from dataclasses import dataclass
from email.message import Message
from email.parser import BytesParser
from pathlib import Path, PurePosixPath
from typing import Any

from packaging.tags import Tag
from packaging.utils import (
    canonicalize_name,
)

from .. import defaults
from ..errors import FatbinError, NotAnElfFile, ProcessError, WheelReadError
from ..system.process import bounded_run
from .elf import demangle, is_elf, read_linkage
from .fatbin import CodeSize, fatbin_sizes, summed
from .manylinux import ARCHITECTURES, judge_object
from .provenance import Provenance
from .read import (
    WheelFile,
    dist_info_folder,
    open_archive,
    read_bytes,
    read_json,
    torch_requirement,
    wheel_file,
)
from .variant import split_variant

__all__ = ["KERNEL_METADATA_FILE", "REPORT_SCHEMA", "Abi3Verdict", "Cubin", "SharedObject",
           "WheelReport", "cubin_sm", "inspect_wheel"]

REPORT_SCHEMA = "kernel-wheel-factory/inspect/1"
KERNEL_METADATA_FILE = "metadata.json"


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

    def to_json(self) -> dict[str, Any]:
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
    blacklisted: dict[str, tuple[str, ...]] | None = None  # library -> symbols manylinux bars
    own_cxx_runtime: bool = False  # libstdc++ linked into it statically
    torch_cxx: tuple[str, ...] = ()  # torch C++ symbols outside the stable ABI, demangled
    size: int = 0  # bytes on disk once installed
    gpu_sizes: tuple[tuple[str, CodeSize], ...] = ()  # sm_90 -> its bytes, stored and inflated

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path, "arch": self.arch, "sass": list(self.sass), "ptx": list(self.ptx),
            "size": self.size,
            "gpu_code_sizes": {code: {"stored": size.stored, "inflated": size.inflated,
                                      "compressed": size.compressed}
                               for code, size in self.gpu_sizes},
            "needed": list(self.needed), "runpaths": list(self.runpaths),
            "symbol_versions": self.symbol_versions,
            "manylinux": self.manylinux, "abi3": self.abi3.to_json() if self.abi3 else None,
            "gpu_code_error": self.gpu_error,
            "blacklisted_symbols": {library: list(symbols)
                                    for library, symbols in (self.blacklisted or {}).items()},
            "own_cxx_runtime": self.own_cxx_runtime,
            "unstable_torch_symbols": list(self.torch_cxx),
        }


@dataclass(frozen=True)
class Cubin:
    """A CUDA binary the wheel ships as a file of its own (a cuTile kernel's), loaded by the
    driver rather than linked: its path and the SM its code is for."""

    path: str
    sm: str

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "sm": self.sm}


# ELF's machine number of CUDA code (EM_CUDA): such a file is GPU code, not a shared object.
_EM_CUDA = 190


def cubin_sm(data: bytes) -> str | None:
    """The SM a cubin's ELF header names (sm_90), or None for any other file. From ELF ABI
    version 8 (CUDA 12.8 on) e_flags holds the SM in its second byte, before in its first."""
    if len(data) < 52 or data[:4] != b"\x7fELF" or data[4] != 2 or \
            int.from_bytes(data[18:20], "little") != _EM_CUDA:
        return None
    flags = int.from_bytes(data[48:52], "little")
    return f"sm_{(flags >> 8) & 0xff if data[8] >= 8 else flags & 0xff}"


@dataclass(frozen=True)
class WheelReport:
    wheel: WheelFile
    metadata_name: str | None
    metadata_version: str | None
    requires_python: str | None
    requires: tuple[str, ...]
    torch_requirement: str | None  # the specifier of the torch requirement: ==2.11.*
    wheel_tags: tuple[str, ...]  # the Tag lines of WHEEL
    files: tuple[str, ...]
    record_problems: tuple[str, ...]
    shared_objects: tuple[SharedObject, ...]
    kernel_metadata: dict[str, Any] | None  # the package's metadata.json (kernel-builder's)
    cubins: tuple[Cubin, ...] = ()
    cutile: tuple[tuple[str, dict[str, Any]], ...] = ()  # each package's cuTile manifest

    @property
    def file(self) -> str:
        return self.wheel.filename

    @property
    def name(self) -> str:
        return self.wheel.name

    @property
    def version(self) -> str:
        return self.wheel.version

    @property
    def label(self) -> str | None:
        return self.wheel.label

    @property
    def sha256(self) -> str:
        return self.wheel.sha256

    @property
    def size(self) -> int:
        return self.wheel.size

    @property
    def provenance(self) -> dict[str, Any] | None:
        return self.wheel.provenance

    @property
    def record(self) -> Provenance | None:
        return self.wheel.record

    @property
    def tags(self) -> tuple[str, ...]:
        return tuple(sorted(str(tag) for tag in self.wheel.tags))

    @property
    def platform_tags(self) -> tuple[str, ...]:
        return tuple(sorted({tag.platform for tag in self.wheel.tags}))

    @property
    def is_abi3(self) -> bool:
        return any(tag.abi == "abi3" for tag in self.wheel.tags)

    @property
    def gpu_sizes(self) -> dict[str, CodeSize]:
        """Each kind of GPU code's bytes over every shared object of the wheel."""
        return summed(item for so in self.shared_objects for item in so.gpu_sizes)

    @property
    def sass(self) -> tuple[str, ...]:
        return tuple(sorted({sm for so in self.shared_objects for sm in so.sass}, key=_arch_key))

    @property
    def ptx(self) -> tuple[str, ...]:
        return tuple(sorted({sm for so in self.shared_objects for sm in so.ptx}, key=_arch_key))

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file, "sha256": self.sha256, "size": self.size,
            "installed_size": self.wheel.installed_size,
            "name": self.name, "version": self.version, "label": self.label,
            "variant": self.wheel.variant,
            "tags": list(self.tags), "requires_python": self.requires_python,
            "requires": list(self.requires), "torch": self.torch_requirement,
            "metadata": {"name": self.metadata_name, "version": self.metadata_version,
                         "wheel_tags": list(self.wheel_tags)},
            "record_problems": list(self.record_problems),
            "sass": list(self.sass), "ptx": list(self.ptx),
            "cubins": [cubin.to_json() for cubin in self.cubins],
            "shared_objects": [so.to_json() for so in self.shared_objects],
            "provenance": self.provenance, "kernel_metadata": self.kernel_metadata,
        }


def inspect_wheel(path: Path) -> WheelReport:
    data = read_bytes(path)
    with open_archive(path, data) as archive:
        contents = {info.filename: archive.read(info) for info in archive.infolist()
                    if not info.is_dir()}
    wheel = wheel_file(path, data, contents, sum(len(member) for member in contents.values()))
    dist_info = dist_info_folder(path, contents)
    metadata = wheel.headers
    requires = wheel.requires
    wheel_headers = _headers(contents, f"{dist_info}/WHEEL")
    objects = []
    cubins = []
    abi3 = _abi3_verdicts(path, wheel.tags)
    with tempfile.TemporaryDirectory(prefix="kwf-inspect-") as scratch:
        for member, member_data in sorted(contents.items()):
            if not is_elf(member_data):
                continue
            sm = cubin_sm(member_data)
            if sm is not None:
                cubins.append(Cubin(member, sm))
                continue
            extracted = Path(scratch) / member
            extracted.parent.mkdir(parents=True, exist_ok=True)
            extracted.write_bytes(member_data)
            objects.append(_shared_object(member, extracted, abi3))
    return WheelReport(
        wheel=wheel,
        metadata_name=metadata.get("Name") if metadata else None,
        metadata_version=metadata.get("Version") if metadata else None,
        requires_python=metadata.get("Requires-Python") if metadata else None,
        requires=requires, torch_requirement=torch_requirement(requires),
        wheel_tags=tuple(sorted(wheel_headers.get_all("Tag") or ())) if wheel_headers else (),
        files=tuple(sorted(contents)),
        record_problems=_record_problems(contents, f"{dist_info}/RECORD"),
        shared_objects=tuple(objects),
        kernel_metadata=_kernel_metadata(contents, metadata),
        cubins=tuple(cubins), cutile=_cutile_manifests(contents),
    )


def _cutile_manifests(contents: dict[str, bytes]) -> tuple[tuple[str, dict[str, Any]], ...]:
    """The manifest of each package's shipped cuTile kernels (factory/data/cutile/runtime.py)."""
    found = []
    for member in sorted(contents):
        parts = PurePosixPath(member).parts
        if len(parts) == 3 and parts[1:] == ("_kwf_cutile", "manifest.json"):
            manifest = read_json(contents, member)
            if manifest is not None:
                found.append((parts[0], manifest))
    return tuple(found)


def _headers(contents: dict[str, bytes], name: str) -> Message | None:
    if name not in contents:
        return None
    return BytesParser().parsebytes(contents[name])


def _kernel_metadata(contents: dict[str, bytes], metadata: Message | None
                     ) -> dict[str, Any] | None:
    if metadata is None or not metadata.get("Name"):
        return None
    package = canonicalize_name(metadata["Name"]).replace("-", "_")
    return read_json(contents, f"{package}/{KERNEL_METADATA_FILE}")


def _record_problems(contents: dict[str, bytes], name: str) -> tuple[str, ...]:
    """What RECORD gets wrong: files it misses, lists without them, or hashes wrongly. RECORD
    is CSV (a name with a comma is quoted), read with the csv module as installers do."""
    if name not in contents:
        return ("RECORD is missing",)
    problems = []
    listed = set()
    text = contents[name].decode("utf-8", "replace")
    for row in csv.reader(io.StringIO(text)):
        if not row:
            continue
        if len(row) != 3:
            problems.append(f"RECORD has a malformed row: {','.join(row)}")
            continue
        path, hash_field, _size = row
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
        raise WheelReadError(exc.message, key=member) from None
    arch = ARCHITECTURES.get(linkage.machine)
    verdict = judge_object(extracted, linkage.needed, linkage.version_needs, arch or "x86_64")
    gpu_error = None
    try:
        sizes = fatbin_sizes(extracted)
    except FatbinError as exc:
        sizes, gpu_error = {}, f"cannot read its GPU code: {exc}"
    entries = list(sizes)
    return SharedObject(
        path=member, arch=arch,
        sass=tuple(str(e) for e in entries if e.kind == "sass"),
        ptx=tuple(str(e) for e in entries if e.kind == "ptx"),
        needed=linkage.needed, runpaths=linkage.runpaths, symbol_versions=verdict.newest,
        manylinux=verdict.name, manylinux_glibc=verdict.glibc,
        abi3=abi3.get(PurePosixPath(member).name)
        or (abi3.get("*") if member.endswith(".abi3.so") else None),
        gpu_error=gpu_error, blacklisted=verdict.blacklisted,
        own_cxx_runtime=linkage.own_cxx_runtime, torch_cxx=demangle(linkage.torch_cxx),
        size=extracted.stat().st_size,
        gpu_sizes=tuple((str(entry), size) for entry, size in sizes.items()),
    )


def _abi3_verdicts(path: Path, tags: frozenset[Tag]) -> dict[str, Abi3Verdict]:
    """abi3audit's verdict for each extension module, by file name; nothing unless the wheel
    is tagged abi3."""
    baseline = next((tag.interpreter for tag in tags if tag.abi == "abi3"), None)
    if baseline is None:
        return {}
    base, label = split_variant(path.name)
    with tempfile.TemporaryDirectory(prefix="kwf-abi3-") as scratch:
        if label is not None:  # abi3audit reads wheel names without a variant label
            audited = Path(scratch) / base
            audited.symlink_to(path.resolve())
        else:
            audited = path
        try:
            done = bounded_run([sys.executable, "-m", "abi3audit", "--report", audited],
                               defaults.TOOL_TIMEOUT, defaults.LOG_OUTPUT_LIMIT)
        except ProcessError as exc:
            version = f"{baseline[2]}.{baseline[3:]}"
            return {"*": Abi3Verdict(False, version, None, (), (), f"abi3audit failed: {exc}")}
    try:
        report = json.loads(done.stdout)["specs"][str(audited)]["wheel"]
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
