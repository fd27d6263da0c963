"""A wheel's provenance object (PEP 740) checked offline: every attestation in it must be signed
by the publisher a matrix pins (else the one its bundle names) over this wheel's name and
sha256."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pypi_attestations import (
    AttestationError,
    Distribution,
    GitHubPublisher,
    GitLabPublisher,
    Provenance,
)

from ..config.publisher import Publisher
from ..errors import FactoryError
from ..index.records import load_manifest
from ..outputs.layout import Layout

__all__ = ["PREDICATES", "AttestationRefused", "check_index", "check_provenance", "sigstore_home"]

PREDICATES = {"https://docs.pypi.org/attestations/publish/v1": "publish",
              "https://slsa.dev/provenance/v1": "SLSA provenance"}


class AttestationRefused(FactoryError):
    """A provenance object that does not attest the wheel it is served with: one line."""


def check_provenance(filename: str, sha256: str, provenance: bytes, pinned: Publisher | None,
                     cache: Path) -> str:
    """What the provenance attests of the wheel `filename` whose bytes have `sha256`, in one
    line; AttestationRefused when any of its attestations fails."""
    try:
        parsed = Provenance.model_validate_json(provenance)
        dist = Distribution(name=filename, digest=sha256)
    except ValidationError as exc:
        raise AttestationRefused(f"{filename}.provenance is not a PEP 740 provenance object "
                                 f"({exc.error_count()} error(s))") from None
    said: list[str] = []
    who = ""
    with sigstore_home(cache):
        for bundle in parsed.attestation_bundles:
            named = bundle.publisher
            identity: Any = _policy(pinned) if pinned is not None else named
            who = pinned.describe() if pinned is not None else _describe(named)
            for attestation in bundle.attestations:
                try:
                    kind, _ = attestation.verify(identity, dist, offline=True)
                except AttestationError as exc:
                    raise AttestationRefused(f"{filename}: an attestation is refused for "
                                             f"{who}: {_first_line(str(exc))}") from None
                said.append(PREDICATES.get(kind, kind))
    if not said:
        raise AttestationRefused(f"{filename}.provenance holds no attestation")
    return f"attested by {who}: {', '.join(said)}, checked offline"


def _policy(publisher: Publisher) -> GitHubPublisher | GitLabPublisher:
    if publisher.kind == "GitHub":
        return GitHubPublisher(repository=publisher.repository, workflow=publisher.workflow)
    return GitLabPublisher(repository=publisher.repository,
                           workflow_filepath=publisher.workflow)


def _describe(named: Any) -> str:
    mine = Publisher.from_json(named.model_dump())
    if mine is not None:
        return mine.describe()
    fields = ", ".join(f"{key} {value}" for key, value in sorted(named.model_dump().items())
                       if key != "kind" and value)
    return f"{named.kind} ({fields})"


def _first_line(text: str) -> str:
    """The library's reason, without the certificate extension it prints as an object."""
    line = (text.strip().splitlines() or ["no reason given"])[0]
    return re.sub(r" \(<Extension\(.*\)>\)", "", line)[:300]


@contextmanager
def sigstore_home(cache: Path) -> Iterator[None]:
    """sigstore keeps its trust root under the user's cache folder: here, under the factory's
    (nothing else is written), and its note that the offline root is not refreshed unsaid."""
    saved = {name: os.environ.get(name) for name in ("XDG_CACHE_HOME", "XDG_DATA_HOME")}
    os.environ["XDG_CACHE_HOME"] = str(cache / "sigstore" / "cache")
    os.environ["XDG_DATA_HOME"] = str(cache / "sigstore" / "data")
    quiet = logging.getLogger("sigstore")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        yield
    finally:
        quiet.setLevel(level)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def check_index(out: Path, pinned: Publisher | None, cache: Path) -> tuple[list[str], int]:
    """Each published wheel of `out` with what its provenance file attests, or why it is
    refused, or that it has none: the lines, and how many were refused."""
    layout = Layout(out)
    lines: list[str] = []
    refused = 0
    for name, record in sorted(load_manifest(layout.manifest).files.items()):
        path = layout.files / f"{name}.provenance"
        if not path.is_file():
            lines.append(f"{name}: not attested (no provenance file)")
            continue
        try:
            lines.append(f"{name}: " + check_provenance(name, record.sha256, path.read_bytes(),
                                                        pinned, cache))
        except AttestationRefused as exc:
            refused += 1
            lines.append(f"refused: {exc}")
    return lines, refused
