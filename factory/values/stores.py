"""What names a remote object store (compile/remote.py): s3://BUCKET/PREFIX, or
redis://[:PASSWORD@]HOST[:PORT][/DB] (rediss:// over TLS)."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

__all__ = ["S3_BUCKET", "STORE_SCHEMES", "object_store_problem", "s3_location"]

STORE_SCHEMES = ("s3", "redis", "rediss")
S3_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


def s3_location(url: str) -> tuple[str, str]:
    """The bucket and the key prefix ("" or ending with /) of s3://BUCKET/PREFIX."""
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    prefix = prefix.strip("/")
    return bucket, prefix + "/" if prefix else ""


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
    if parts.scheme == "s3" and (parts.password or parts.username):
        return ("holds credentials: an s3:// store takes boto3's own (AWS_ACCESS_KEY_ID, "
                "~/.aws), never the URL's")
    if parts.scheme == "s3" and not S3_BUCKET.fullmatch(s3_location(url)[0]):
        return f"names no S3 bucket ('{s3_location(url)[0]}')"
    if (parts.password or parts.username) and not password_allowed:
        return ("holds a password: give the store's URL with its password in "
                "$KERNEL_WHEEL_FACTORY_OBJECT_STORE (a secret), not here")
    if parts.query or parts.fragment:
        return "has a query or fragment, which an object store's URL does not take"
    return None
