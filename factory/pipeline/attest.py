"""`factory attest MATRIX`: the published wheels of an output folder signed (PEP 740) as the
matrix's publisher, or their attestations checked offline against it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..attest import AttestSummary, attest_index, check_index
from ..attest.sign import serve_at
from ..config.matrix import load_matrix
from ..index.update import update_index

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
    summary = attest_index(request.out, publisher, None, request.cache, say)
    _pages(request, changed=bool(summary.signed))
    return summary


def check_outputs(request: AttestRequest) -> tuple[list[str], int]:
    """Each published wheel with what its attestations prove; and how many were refused."""
    publisher = load_matrix(request.matrix).publisher
    if request.url is not None:
        serve_at(request.out, request.url)
        _pages(request, changed=False)
    return check_index(request.out, publisher, request.cache)


def _pages(request: AttestRequest, changed: bool) -> None:
    """The index made again once: in full where --url changed every page's links, else where
    wheels were signed."""
    if request.url is not None or changed:
        update_index(request.out, full=request.url is not None)
