"""`factory attest OUT`: the wheels of an output folder that have no provenance file yet,
signed with the CI job's OIDC identity (sigstore's keyless signing: Fulcio's certificate for
the identity, Rekor's log entry); the command then makes the index's pages again, once, so
that they link them."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pypi_attestations import (
    Attestation,
    AttestationBundle,
    AttestationError,
    Distribution,
    Provenance,
)
from sigstore.dsse import DigestSet, StatementBuilder, Subject
from sigstore.errors import Error as SigstoreError
from sigstore.models import ClientTrustConfig
from sigstore.oidc import IdentityError, IdentityToken, detect_credential
from sigstore.sign import SigningContext

from ..config.publisher import Publisher
from ..errors import BuildError, ConfigError
from ..index.records import load_manifest
from ..outputs.files import write_atomic
from ..outputs.layout import Layout
from ..wheel.read import read_wheel
from .check import sigstore_home

__all__ = ["BUILD_TYPE", "AttestSummary", "attest_index", "serve_at", "slsa_predicate"]

BUILD_TYPE = "urn:kernel-wheel-factory:wheel-build:v1"
SLSA = "https://slsa.dev/provenance/v1"


@dataclass(frozen=True)
class AttestSummary:
    signed: tuple[str, ...]  # the wheels attested now
    attested: int  # those that were already
    unattested: int  # those left without (no identity)
    why: str | None = None  # why none was signed

    def describe(self) -> str:
        if self.why is not None:
            return f"{self.why}: {self.unattested} wheel(s) left unattested"
        return (f"{len(self.signed)} wheel(s) attested now, {self.attested} already; each "
                "has <wheel>.provenance and <wheel>.publish.attestation")


def attest_index(out: Path, pinned: Publisher | None, token: str | None, cache: Path,
                 say: Callable[[str], None]) -> AttestSummary:
    layout = Layout(out)
    names = sorted(load_manifest(layout.manifest).files)
    waiting = [layout.files / name for name in names
               if not (layout.files / f"{name}.provenance").exists()]
    attested = len(names) - len(waiting)
    if not waiting:
        return AttestSummary((), attested, 0)
    token = token or os.environ.get("KERNEL_WHEEL_FACTORY_ID_TOKEN") or _ambient()
    if token is None:
        return AttestSummary((), attested, len(waiting), _NO_IDENTITY)
    try:
        identity = IdentityToken(token)
    except IdentityError as exc:
        raise BuildError(f"the OIDC identity token is not one sigstore takes: {exc}") from None
    publisher = _publisher_of(identity, pinned)
    signed = []
    with sigstore_home(cache):
        trust = ClientTrustConfig.production()
        trust.force_tlog_version = 1  # attestations are checked against Rekor v1 entries
        with SigningContext.from_trust_config(trust).signer(identity, cache=True) as signer:
            for wheel in waiting:
                say(f"signing {wheel.name}")
                _attest(signer, wheel, publisher)
                signed.append(wheel.name)
    return AttestSummary(tuple(signed), attested, 0)


_NO_IDENTITY = ("no OIDC identity token here (a GitHub Actions job with `permissions: "
                "id-token: write` has one)")


def serve_at(out: Path, url: str) -> None:
    """Record where the index in `out` is served: its pages, made again in full, link its
    provenance files by full URL there (PEP 740 asks for a secure origin: https, or this
    machine)."""
    parsed = urlsplit(url)
    local = parsed.hostname in ("localhost", "127.0.0.1", "::1")
    if not parsed.netloc or parsed.query or parsed.fragment or parsed.username or \
            parsed.password or not (parsed.scheme == "https" or
                                    (parsed.scheme == "http" and local)):
        raise ConfigError(f"'{url}' is not where an index is served: an https:// URL (or "
                          "http:// on this machine), with no query, fragment or credentials",
                          key="--url")
    layout = Layout(out)
    layout.private.mkdir(parents=True, exist_ok=True)
    write_atomic(layout.public_url, url.rstrip("/") + "/\n")


def _ambient() -> str | None:
    try:
        return detect_credential()
    except IdentityError:
        return None


def _attest(signer: Any, wheel: Path, publisher: Publisher) -> None:
    dist = Distribution.from_file(wheel)
    try:
        publish = Attestation.sign(signer, dist)
        statement = (StatementBuilder()
                     .subjects([Subject(name=dist.name,
                                        digest=DigestSet(root={"sha256": dist.digest}))])
                     .predicate_type(SLSA)
                     .predicate(slsa_predicate(read_wheel(wheel).provenance or {}))
                     .build())
        provenance = Attestation.from_bundle(signer.sign_dsse(statement))
    except (AttestationError, SigstoreError) as exc:
        raise BuildError(f"{wheel.name} could not be signed: {exc}") from None
    bundle = AttestationBundle.model_validate({"publisher": publisher.to_json(),
                                              "attestations": [publish.model_dump(),
                                                               provenance.model_dump()]})
    write_atomic(wheel.with_name(f"{wheel.name}.publish.attestation"), publish.model_dump_json())
    write_atomic(wheel.with_name(f"{wheel.name}.provenance"),
                 Provenance(attestation_bundles=[bundle]).model_dump_json())


def slsa_predicate(made: dict[str, Any]) -> dict[str, Any]:
    """An SLSA provenance v1 predicate from what a wheel's provenance.json says of its making:
    the source and cell it was built from, the toolchain that built it."""
    source = made.get("source") or {}
    commit = (source.get("git") or {}).get("commit") or source.get("commit")
    dependencies = [{"uri": str(source.get("location", "")), "digest": {"gitCommit": commit}}] \
        if commit else []
    return {
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": {"source": source, "cell": (made.get("cell") or {}).get("id"),
                                   "kernel": made.get("kernel")},
            "internalParameters": {"toolchain": made.get("toolchain"),
                                   "cell": made.get("cell")},
            "resolvedDependencies": dependencies,
        },
        "runDetails": {"builder": {"id": f"{BUILD_TYPE}:{made.get('factory', 'unknown')}"}},
    }


def _publisher_of(identity: IdentityToken, pinned: Publisher | None) -> Publisher:
    """The publisher the token is for (GitHub Actions': its repository and the workflow file
    that runs), which must be the pinned one."""
    claims = getattr(identity, "_unverified_claims", {}) or {}
    repository, workflow_ref = claims.get("repository"), claims.get("workflow_ref")
    found = None
    if isinstance(repository, str) and isinstance(workflow_ref, str):
        path = workflow_ref.split("@", 1)[0]
        found = Publisher("GitHub", repository, path.rsplit("/", 1)[-1])
    if pinned is not None and found is not None and found != pinned:
        raise BuildError(f"the identity token is {found.describe()}'s, not the publisher the "
                         f"matrix pins ({pinned.describe()}): nothing is signed")
    publisher = pinned or found
    if publisher is None:
        raise BuildError("the identity token names no GitHub repository and workflow: pin "
                         "the publisher in matrix.yaml (publisher: {gitlab: ..., workflow: "
                         "...})")
    return publisher
