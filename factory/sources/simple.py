"""What reading a simple index (PEP 503/691) with pypi-simple can fail with."""

from __future__ import annotations

__all__ = ["read_failures", "shown"]


def read_failures() -> tuple[type[Exception], ...]:
    """The exceptions of a server that fails or answers with something that is not an index:
    requests' own (an Overrun among them), pypi-simple's content-type, digest and filename
    errors and bad JSON (all ValueErrors), JSON nested past the parser's depth, an index of an
    API version it does not read, a metadata file it lacks."""
    import requests
    from pypi_simple import NoMetadataError, UnsupportedRepoVersionError

    return (requests.RequestException, ValueError, RecursionError, UnsupportedRepoVersionError,
            NoMetadataError)


def shown(exc: BaseException) -> str:
    """An exception's message on one line, at most 300 characters (a server's answer may be
    long, or hold line breaks); its type's name when it has none."""
    text = " ".join(str(exc).split())
    return text[:300] if text else type(exc).__name__
