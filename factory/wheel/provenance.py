"""provenance.json, the record a wheel carries of its own making, as typed values: one codec
for the build that writes it and for every reader (verify, the index's records, inspect, the
gates). A field renamed here fails type checking in each of them.

The record holds the kernel (name, version, ops namespace, the build.toml's digest), the source
(where, which tree, which commit), the cell (its own record, plan/codec.py, with build
variables named by the sha256 of their values), the toolchain, the factory's version and the
build (its fixed folder and the source's time), and, where measured, the bytes of GPU code the
wheel holds. `to_json` gives the same keys, in the same presence, as every record written
since schema 1, so a wheel rebuilt from its record gives the same bytes.

Records come from any wheel, so reading is strict: `from_json` refuses a record that lacks a
field or has one of the wrong type, naming it; `read` gives None for such a record, for readers
that show what they can of foreign wheels.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from ..config.model import SOURCE_KINDS, SourceKind
from ..errors import FactoryError

__all__ = ["SCHEMA", "BuildFacts", "GitFacts", "KernelFacts", "Provenance", "ProvenanceError",
           "SourceFacts"]

SCHEMA = "kernel-wheel-factory/provenance/1"


class ProvenanceError(FactoryError, ValueError):
    """A record that is not a provenance record of this schema; the message names the field
    (a ValueError too, as any malformed value)."""


@dataclass(frozen=True)
class KernelFacts:
    name: str
    version: str
    ops_namespace: str
    build_toml_sha256: str
    project_file: str | None = None  # a PEP 517 project's setup.py or pyproject.toml

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "version": self.version,
                                "ops_namespace": self.ops_namespace,
                                "build_toml_sha256": self.build_toml_sha256}
        if self.project_file is not None:
            data["project_file"] = self.project_file
        return data

    @classmethod
    def from_json(cls, data: object) -> KernelFacts:
        fields = _fields(data, "kernel")
        return cls(_text(fields, "kernel", "name"), _text(fields, "kernel", "version"),
                   _text(fields, "kernel", "ops_namespace"),
                   _text(fields, "kernel", "build_toml_sha256"),
                   _optional_text(fields, "kernel", "project_file"))


@dataclass(frozen=True)
class GitFacts:
    commit: str
    dirty: bool

    def to_json(self) -> dict[str, Any]:
        return {"commit": self.commit, "dirty": self.dirty}

    @classmethod
    def from_json(cls, data: object) -> GitFacts:
        fields = _fields(data, "source.git")
        dirty = fields.get("dirty")
        if not isinstance(dirty, bool):
            raise ProvenanceError("source.git.dirty is not true or false")
        return cls(_text(fields, "source.git", "commit"), dirty)


@dataclass(frozen=True)
class SourceFacts:
    kind: SourceKind
    location: str
    tree_sha256: str
    git: GitFacts | None = None
    revision: str | None = None  # what a git or Hub source asked for
    subdir: str | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"kind": self.kind, "location": self.location,
                                "tree_sha256": self.tree_sha256,
                                "git": self.git.to_json() if self.git else None}
        if self.kind != "path":  # a fetched source names both, set or not
            data |= {"revision": self.revision, "subdir": self.subdir}
        return data

    @classmethod
    def from_json(cls, data: object) -> SourceFacts:
        fields = _fields(data, "source")
        kind = _text(fields, "source", "kind")
        if kind not in SOURCE_KINDS:
            raise ProvenanceError(f"source.kind is {kind!r}, not one of {', '.join(SOURCE_KINDS)}")
        git = fields.get("git")
        return cls(cast(SourceKind, kind), _text(fields, "source", "location"),
                   _text(fields, "source", "tree_sha256"),
                   GitFacts.from_json(git) if git is not None else None,
                   _optional_text(fields, "source", "revision"),
                   _optional_text(fields, "source", "subdir"))


@dataclass(frozen=True)
class BuildFacts:
    root: str  # the fixed folder the cell compiled in
    source_date_epoch: int
    time: str  # the source's time, as ISO 8601
    builder: str | None = None  # the builder image it ran in
    index_url: str | None = None  # the torch index it was built against

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"root": self.root, "source_date_epoch": self.source_date_epoch,
                                "time": self.time}
        if self.builder is not None:
            data["builder"] = self.builder
        if self.index_url is not None:
            data["index_url"] = self.index_url
        return data

    @classmethod
    def from_json(cls, data: object) -> BuildFacts:
        fields = _fields(data, "build")
        epoch = fields.get("source_date_epoch")
        if not isinstance(epoch, int) or isinstance(epoch, bool):
            raise ProvenanceError("build.source_date_epoch is not a whole number")
        return cls(_text(fields, "build", "root"), epoch, _text(fields, "build", "time"),
                   _optional_text(fields, "build", "builder"),
                   _optional_text(fields, "build", "index_url"))


@dataclass(frozen=True)
class Provenance:
    factory: str
    kernel: KernelFacts
    source: SourceFacts
    cell: Mapping[str, Any]  # the cell's record (plan/codec.py)
    toolchain: Mapping[str, str]
    build: BuildFacts
    gpu_code_sizes: Mapping[str, list[int]] | None = None  # sm_90 -> [stored, inflated]
    gpu_code_found: Mapping[str, list[str]] | None = None  # a PEP 517 project's own arch list

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "schema": SCHEMA, "factory": self.factory, "kernel": self.kernel.to_json(),
            "source": self.source.to_json(), "cell": dict(self.cell),
            "toolchain": dict(self.toolchain), "build": self.build.to_json(),
        }
        if self.gpu_code_sizes is not None:
            data["gpu_code_sizes"] = {entry: list(sizes)
                                      for entry, sizes in self.gpu_code_sizes.items()}
        if self.gpu_code_found is not None:
            data["gpu_code_found"] = {path: list(codes)
                                      for path, codes in self.gpu_code_found.items()}
        return data

    @classmethod
    def from_json(cls, data: object) -> Provenance:
        fields = _fields(data, "the record")
        if fields.get("schema") != SCHEMA:
            raise ProvenanceError(f"its schema is {fields.get('schema')!r}, not {SCHEMA!r}")
        cell = _fields(fields.get("cell"), "cell")
        toolchain = _fields(fields.get("toolchain"), "toolchain")
        if not all(isinstance(value, str) for value in toolchain.values()):
            raise ProvenanceError("toolchain has a value that is not text")
        return cls(_text(fields, "the record", "factory"),
                   KernelFacts.from_json(fields.get("kernel")),
                   SourceFacts.from_json(fields.get("source")), cell, toolchain,
                   BuildFacts.from_json(fields.get("build")),
                   _sizes(fields.get("gpu_code_sizes")), _found(fields.get("gpu_code_found")))

    @classmethod
    def read(cls, data: object) -> Provenance | None:
        """The record, or None where there is none or it is not one of this schema."""
        try:
            return cls.from_json(data) if data is not None else None
        except ProvenanceError:
            return None


def _fields(data: object, where: str) -> dict[str, Any]:
    if not isinstance(data, dict) or not all(isinstance(key, str) for key in data):
        raise ProvenanceError(f"{where} is missing or not an object")
    return data


def _text(fields: dict[str, Any], where: str, name: str) -> str:
    value = fields.get(name)
    if not isinstance(value, str):
        raise ProvenanceError(f"{where}.{name} is missing or not text")
    return value


def _optional_text(fields: dict[str, Any], where: str, name: str) -> str | None:
    return None if fields.get(name) is None else _text(fields, where, name)


def _sizes(data: object) -> dict[str, list[int]] | None:
    if data is None:
        return None
    sizes = _fields(data, "gpu_code_sizes")
    for entry, pair in sizes.items():
        if not (isinstance(pair, list) and len(pair) == 2
                and all(isinstance(n, int) and not isinstance(n, bool) for n in pair)):
            raise ProvenanceError(f"gpu_code_sizes.{entry} is not [stored, inflated]")
    return sizes


def _found(data: object) -> dict[str, list[str]] | None:
    if data is None:
        return None
    found = _fields(data, "gpu_code_found")
    for path, codes in found.items():
        if not (isinstance(codes, list) and all(isinstance(code, str) for code in codes)):
            raise ProvenanceError(f"gpu_code_found.{path} is not a list of GPU code names")
    return found
