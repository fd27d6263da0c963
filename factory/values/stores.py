"""What names a remote object store (compile/remote.py): s3://BUCKET/PREFIX, or
redis://[:PASSWORD@]HOST[:PORT][/DB] (rediss:// over TLS)."""

from __future__ import annotations

from urllib.parse import urlsplit

__all__ = ["STORE_SCHEMES", "object_store_problem"]

STORE_SCHEMES = ("s3", "redis", "rediss")


def object_store_problem(url: str, password_allowed: bool) -> str | None:
    """What is wrong with an object store's URL, or None. A password belongs in the
    environment only (`password_allowed`): a matrix is committed, a command line is seen by
    every process of the machine."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (a port that is not a number raises)
    except ValueError as exc:
        return f"is not a URL ({exc})"
    if parts.scheme not in STORE_SCHEMES or not parts.hostname:
        return "is not an object store: s3://BUCKET/PREFIX or redis://HOST:PORT/DB"
    if (parts.password or parts.username) and not password_allowed:
        return ("holds a password: give the store's URL with its password in "
                "$KERNEL_WHEEL_FACTORY_OBJECT_STORE (a secret), not here")
    if parts.query or parts.fragment:
        return "has a query or fragment, which an object store's URL does not take"
    return None
