"""Wheel variants (PEP 825): the same binaries as a labelled wheel, named and described so an
installer that knows variants picks the build that fits the machine.

    img2gray-1.0.0+cu130torch211-cp39-abi3-manylinux_2_28_x86_64.whl        the cell's wheel
    img2gray-1.0.0-cp39-abi3-manylinux_2_28_x86_64-cu130torch211.whl        its variant

A variant wheel carries the public version (all variants of a release share it; the installer
orders them by their properties), the cell's label as its variant label, and
`*.dist-info/variant.json` naming its properties in the `nvidia` namespace: the lowest CUDA
driver it needs (the toolkit's major.minor) and the GPUs it has code for (`90_real` for SASS of
sm_90, `90_virtual` for PTX of compute_90). Every other member, the shared objects above all,
is copied byte for byte.

variantlib validates what is written here and parses variant file names; the JSON itself is
written here because variantlib writes its own schema URL, which uv (the installer that reads
variants today) does not accept, and it has no way to re-issue a wheel under another version.
The torch ABI is not a property: installers without PEP 817's `abi_dependency` extension (uv
0.13 among them) must treat such variants as incompatible, so the index keeps one variant
index per torch release instead (index/update.py).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import logging
import re
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from ..errors import WheelReadError
from ..outputs.files import atomic_target
from ..trust.safety import leaves_root
from .assemble import record_hash, wheel_name

# variantlib logs each refused value with its traceback before raising; the factory says why
# in its own one line (the ValidationError's message)
logging.getLogger("variantlib").setLevel(logging.CRITICAL + 1)

__all__ = ["NAMESPACE", "SCHEMA", "VARIANT_FILE", "Properties", "check_variant_json",
           "gpu_properties", "make_variant", "property_lines", "split_variant",
           "variant_filename", "variants_document", "variants_json_name"]

SCHEMA = "https://variants-schema.wheelnext.dev/peps/825/v0.1.1.json"
NAMESPACE = "nvidia"
# The NVIDIA provider as installers know it (uv carries its own implementation of it).
PROVIDER = {"requires": ["nvidia-variant-provider>=0.0.1,<1.0.0"],
            "plugin-api": "nvidia_variant_provider.plugin:NvidiaVariantPlugin"}
VARIANT_FILE = "variant.json"

Properties = dict[str, dict[str, list[str]]]  # namespace -> feature -> values

_GPU_CODE = re.compile(r"(?P<kind>sm|compute)_(?P<arch>\d+)[af]?")


def gpu_properties(cuda: str | None, gpu_code: Iterable[str]) -> Properties | None:
    """A compiled wheel's properties: the CUDA driver it needs (at least its toolkit's
    major.minor, which minor-version compatibility makes enough) and the GPUs its code runs on.
    SASS of sm_90 (and of the arch-specific sm_90a) runs on compute capability 9.0 only:
    `90_real`; PTX of compute_90 compiles for 9.0 and later GPUs: `90_virtual`. None for a
    wheel with no GPU code or no CUDA version."""
    try:
        toolkit = Version(cuda) if cuda else None
    except InvalidVersion:
        toolkit = None
    archs: set[str] = set()
    for code in gpu_code:
        match = _GPU_CODE.fullmatch(code)
        if match is None:
            continue
        virtual = match["kind"] == "compute" and not code.endswith(("a", "f"))
        archs.add(f"{match['arch']}_{'virtual' if virtual else 'real'}")
    if toolkit is None or not archs:
        return None
    return {NAMESPACE: {
        "cuda_version_lower_bound": [f"{toolkit.major}.{toolkit.minor}"],
        "sm_arch": sorted(archs, key=lambda value: (int(value.split("_")[0]), value)),
    }}


def property_lines(properties: Properties) -> list[str]:
    """`nvidia :: sm_arch :: 90_real`, one per value, as PEP 825 writes a property."""
    return [f"{namespace} :: {feature} :: {value}"
            for namespace, features in sorted(properties.items())
            for feature, values in sorted(features.items()) for value in values]


def variants_document(variants: Mapping[str, Properties]) -> dict[str, Any]:
    """variant.json of one wheel (one label) or {name}-{version}-variants.json of a release
    (every label the index has of it), checked by variantlib."""
    namespaces = sorted({namespace for properties in variants.values()
                         for namespace in properties})
    document = {
        "$schema": SCHEMA,
        "default-priorities": {"namespace": namespaces},
        "providers": dict.fromkeys(namespaces, PROVIDER),
        "variants": {label: variants[label] for label in sorted(variants)},
    }
    _validated(document)
    return document


def _validated(document: dict[str, Any]) -> None:
    from variantlib.errors import ValidationError
    from variantlib.variants_json import VariantsJson

    try:
        VariantsJson(document)
    except ValidationError as exc:
        raise WheelReadError(f"variant metadata that PEP 825 refuses ({exc})") from None


def check_variant_json(data: bytes, label: str, where: str | Path) -> Properties:
    """The properties a wheel's variant.json gives its label, refused (with variantlib's
    reason) unless it is a valid PEP 825 document naming that one label."""
    from variantlib.errors import ValidationError
    from variantlib.variant_dist_info import VariantDistInfo

    try:
        VariantDistInfo(data, expected_label=label)
        properties = json.loads(data)["variants"][label]
    except (ValidationError, ValueError, KeyError, TypeError) as exc:
        raise WheelReadError(f"its {VARIANT_FILE} is not valid variant metadata for label "
                             f"{label} ({exc})", file=where) from None
    except RecursionError:
        raise WheelReadError(f"its {VARIANT_FILE} nests deeper than variant metadata does",
                             file=where) from None
    return {str(namespace): {str(feature): [str(value) for value in values]
                             for feature, values in features.items()}
            for namespace, features in properties.items()}


def split_variant(filename: str) -> tuple[str, str | None]:
    """A wheel name without its variant label, and the label (None: not a variant wheel)."""
    from variantlib.constants import VALIDATION_WHEEL_NAME_REGEX

    match = VALIDATION_WHEEL_NAME_REGEX.fullmatch(filename)
    if match is None or match["variant_label"] is None:
        return filename, None
    return match["base_wheel_name"] + ".whl", match["variant_label"]


def variant_filename(filename: str, label: str) -> str:
    """The variant wheel of a labelled wheel: public version, label after the tags."""
    name, version, rest = filename.removesuffix(".whl").split("-", 2)
    return f"{name}-{Version(version).public}-{rest}-{label}.whl"


def variants_json_name(project: str, version: str) -> str:
    """{name}-{version}-variants.json, both normalised as in wheel file names."""
    return f"{wheel_name(project)}-{Version(version)}-variants.json"


def make_variant(wheel: Path, folder: Path, label: str, properties: Properties) -> Path:
    """Write the variant wheel of `wheel` into `folder` (atomically) and return its path.

    Each member is copied with its own name, time, permissions and compression, in its own
    order, so the same wheel always gives the same variant; only the .dist-info folder's name,
    METADATA's Version and RECORD change, and variant.json joins them. Written here: no
    maintained tool re-issues a wheel under another version (`wheel tags` changes tags only).
    """
    target = folder / variant_filename(wheel.name, label)
    document = json.dumps(variants_document({label: properties}), indent=2,
                          sort_keys=True).encode() + b"\n"
    try:
        with zipfile.ZipFile(wheel) as source, atomic_target(target) as temporary, \
                zipfile.ZipFile(temporary, "w") as archive:
            _copy(source, archive, label, document, wheel)
    except (zipfile.BadZipFile, OSError, KeyError, ValueError) as exc:
        raise WheelReadError(f"cannot make its variant wheel ({exc})", file=wheel) from None
    return target


def _copy(source: zipfile.ZipFile, archive: zipfile.ZipFile, label: str, document: bytes,
          wheel: Path) -> None:
    members = source.infolist()
    for info in members:  # re-issued as they are: each must be a plain path inside the wheel
        if leaves_root(info.filename) or "\\" in info.filename:
            raise WheelReadError(f"holds the member {info.filename!r}, which leads outside the "
                                 "wheel", file=wheel)
    old = next((info.filename.split("/")[0] for info in members
                if info.filename.split("/")[0].endswith(".dist-info")), None)
    if old is None:
        raise WheelReadError("has no .dist-info folder", file=wheel)
    if f"{old}/RECORD" not in source.namelist():
        raise WheelReadError("has no RECORD in its .dist-info", file=wheel)
    name, _, version = old.removesuffix(".dist-info").partition("-")
    public = Version(version).public
    new = f"{name}-{public}.dist-info"
    changed: dict[str, bytes] = {
        f"{new}/METADATA": _public_metadata(source.read(f"{old}/METADATA"), public),
        f"{new}/{VARIANT_FILE}": document,
    }
    for info in members:
        renamed = new + info.filename[len(old):] if info.filename.startswith(old + "/") \
            else info.filename
        if renamed == f"{new}/RECORD":
            _write(archive, info, f"{new}/{VARIANT_FILE}", document)
            record = _record(source.read(info.filename).decode(), old, new, changed)
            _write(archive, info, renamed, record)
        elif renamed in changed:
            _write(archive, info, renamed, changed[renamed])
        else:
            copy = _like(info, renamed)
            copy.file_size = info.file_size
            with source.open(info) as reader, archive.open(copy, "w") as writer:
                while chunk := reader.read(1 << 24):
                    writer.write(chunk)


def _like(info: zipfile.ZipInfo, name: str) -> zipfile.ZipInfo:
    copy = zipfile.ZipInfo(name, date_time=info.date_time)
    copy.external_attr = info.external_attr
    copy.compress_type = info.compress_type
    copy.create_system = info.create_system
    return copy


def _write(archive: zipfile.ZipFile, like: zipfile.ZipInfo, name: str, data: bytes) -> None:
    archive.writestr(_like(like, name), data)


def _public_metadata(data: bytes, public: str) -> bytes:
    head, blank, body = data.partition(b"\n\n")
    head = re.sub(rb"(?im)^Version:[^\n]*$", f"Version: {public}".encode(), head, count=1)
    return head + blank + body


def _record(text: str, old: str, new: str, changed: Mapping[str, bytes]) -> bytes:
    rows = []
    for row in csv.reader(io.StringIO(text)):
        if not row:
            continue
        path = new + row[0][len(old):] if row[0].startswith(old + "/") else row[0]
        if path == f"{new}/RECORD":
            continue
        if path in changed:
            row = [path, _digest(changed[path]), str(len(changed[path]))]
        rows.append([path, *row[1:]])
    variant = f"{new}/{VARIANT_FILE}"
    rows.append([variant, _digest(changed[variant]), str(len(changed[variant]))])
    rows.append([f"{new}/RECORD", "", ""])
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue().encode()


def _digest(data: bytes) -> str:
    return record_hash(hashlib.sha256(data))
