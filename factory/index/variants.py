"""The variants indexes: every compiled wheel again as a PEP 825 variant wheel (same binaries,
wheel/variant.py), listed in one index per torch release, where an installer that knows
variants picks the CUDA build and GPU code that fit the machine:

    <out>/files/img2gray-1.0.0-cp39-abi3-manylinux_2_28_x86_64-cu130torch211.whl
    <out>/variants/torch211/simple/img2gray/                      the project page, linking
    <out>/variants/torch211/simple/img2gray/img2gray-1.0.0-variants.json

One index per torch release, not one for all: a torch build's ABI is no variant property
installers read today (wheel/variant.py says why), so an index that offered the variants of
two torch releases under one version would let the installer take one built for the other
torch. Every variant wheel is also in the combined simple/ index (with its variants.json), so a
merge of a published site keeps it.

The variants.json of a release is a page, not a published file: it lists the labels this index
has and is rewritten (atomically) when one joins.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path

from packaging.version import InvalidVersion, Version

from ..errors import IndexConflict, WheelReadError
from ..values.versions import compact, major_minor
from ..wheel.read import WheelFile, read_wheel
from ..wheel.variant import (
    Properties,
    gpu_properties,
    make_variant,
    variant_filename,
    variants_document,
    variants_json_name,
)
from .records import Catalogue, FileRecord, served_cells

__all__ = ["VARIANTS", "consistent_variants", "make_variants", "variant_indexes",
           "variant_url", "variants_files"]

VARIANTS = "variants"


def variant_url(torch: str) -> str | None:
    """The variants index of a torch release, relative to the site: variants/torch211/simple/;
    None for a torch that is no release version."""
    try:
        release = major_minor(Version(torch))
    except (InvalidVersion, ValueError):
        return None
    return f"{VARIANTS}/torch{compact(release)}/simple/"


def variant_indexes(record: FileRecord, catalogue: Catalogue) -> list[str]:
    """The variants indexes that list a variant wheel: its torch release's, or, for a
    stable-ABI wheel, those of the torch releases of the cells it serves."""
    if record.summary.get("stable_abi"):
        torches = {torch for _, torch, _ in served_cells(record, catalogue)}
    else:
        torches = {str(record.summary.get("torch") or "")}
    return sorted({url.rstrip("/") for torch in torches if (url := variant_url(torch))})


def variants_files(project: str, records: Iterable[FileRecord]) -> dict[str, bytes]:
    """{name}-{version}-variants.json of each release among `records` that has variant
    wheels: the labels and properties of those wheels."""
    releases: dict[str, dict[str, Properties]] = defaultdict(dict)
    for record in records:
        properties = record.summary.get("variant")
        if properties is not None and record.label is not None:
            releases[record.version][record.label] = properties
    return {variants_json_name(project, version): (json.dumps(
        variants_document(variants), indent=2, sort_keys=True) + "\n").encode()
        for version, variants in releases.items()}


def consistent_variants(records: dict[str, FileRecord],
                        published: Iterable[str] = ()) -> list[str]:
    """PEP 825: a label means one set of properties across a release's wheels. A variant
    wheel that gives its label other properties than an earlier one did (the `published`
    names first, then by name: a new file never displaces a published one) is removed from
    `records`; one line each."""
    seen: dict[tuple[str, str, str], tuple[str, Properties]] = {}
    problems = []
    known = set(published)
    for name in sorted(records, key=lambda name: (name not in known, name)):
        record = records[name]
        properties = record.summary.get("variant")
        if properties is None or record.label is None:
            continue
        key = (record.project, record.version, record.label)
        first = seen.setdefault(key, (name, properties))
        if first[1] != properties:
            del records[name]
            problems.append(f"{name}: variant label {record.label} already means other "
                            f"properties in {first[0]} (a label is one set of properties "
                            "per release, PEP 825): left out of the index; move it out of "
                            "files/")
    return problems


def make_variants(files: Path, wheels: Mapping[str, FileRecord]) -> dict[str, WheelFile]:
    """The variant wheel of each compiled, labelled wheel in `files` that has none yet, made
    from its bytes (nothing is compiled again); read back for the index. A variant already
    there is kept as it is (published files are immutable)."""
    made: dict[str, WheelFile] = {}
    for name, record in sorted(wheels.items()):
        if record.summary.get("variant") is not None or record.label is None:
            continue
        properties = gpu_properties(record.summary.get("cuda"),
                                    record.summary.get("gpu_code") or ())
        if properties is None:
            continue
        if (files / variant_filename(name, record.label)).exists():
            continue
        try:
            path = make_variant(files / name, files, record.label, properties)
        except WheelReadError as exc:
            raise IndexConflict(f"{files / name}: {exc.message}; no variant wheel was made of "
                                "it") from None
        made[path.name] = read_wheel(path)
    return made
