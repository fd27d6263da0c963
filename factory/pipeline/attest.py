"""`factory attest MATRIX`: the published wheels of an output folder signed (PEP 740) as the
matrix's publisher, or their attestations checked offline against it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..attest import AttestSummary, attest_index, check_index
from ..attest.sign import serve_at
from ..config.matrix import load_matrix

__all__ = ["AttestRequest", "attest_outputs", "check_outputs"]


@dataclass(frozen=True)
class AttestRequest:
    matrix: Path
    out: Path
    cache: Path
    url: str | None = None  # where the index is served: its pages then link the provenance


def attest_outputs(request: AttestRequest, say: Callable[[str], None]) -> AttestSummary:
    publisher = load_matrix(request.matrix).publisher
    if request.url is not None:
        serve_at(request.out, request.url)
    return attest_index(request.out, publisher, None, request.cache, say)


def check_outputs(request: AttestRequest) -> tuple[list[str], int]:
    """Each published wheel with what its attestations prove; and how many were refused."""
    publisher = load_matrix(request.matrix).publisher
    if request.url is not None:
        serve_at(request.out, request.url)
    return check_index(request.out, publisher, request.cache)
