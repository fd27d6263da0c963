"""The object cache's key: what tells an entry this factory wrote from one written by anyone
else who can write the cache folder (another user, a restored CI cache, a shard's artifact).

A publish-journal note (outputs/journal.py) is signed under it too. An object's record carries
an HMAC-SHA256, under this key, of the object's cache key (which
covers its command and every input), its command's identity, its size and sha256. Where the
key comes from is settled with the other options (pipeline/options.py): a secret given
($KERNEL_WHEEL_FACTORY_OBJECT_KEY, a CI secret, the same for every job of a run, so the jobs
hand objects to each other), else a file of random bytes made on first use in the user's
configuration folder, readable by the user alone; never inside the cache.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import os
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError, FactoryError
from ..outputs.files import read_regular

__all__ = ["KEY_FILE", "OBJECT_KEY_VARIABLE", "GivenKey", "KeyFile", "ObjectKey",
           "existing_key", "object_cache_key", "sign"]

OBJECT_KEY_VARIABLE = "KERNEL_WHEEL_FACTORY_OBJECT_KEY"
KEY_FILE = Path("kernel-wheel-factory") / "object-cache.key"  # in the configuration folder
_KEY_FILE_LIMIT = 4096  # bytes: the key file holds 64 hex digits


@dataclass(frozen=True)
class GivenKey:
    """A secret given as text (at least 16 characters), hashed into the key."""

    secret: str = field(repr=False)


@dataclass(frozen=True)
class KeyFile:
    """A file holding the key in hex, made on first use."""

    path: Path


ObjectKey = GivenKey | KeyFile


def existing_key(source: ObjectKey) -> bytes | None:
    """The key where there is one, without making one: for checking what a build signed, from
    a command that writes nothing outside its folder."""
    if isinstance(source, GivenKey):
        return object_cache_key(source)
    try:
        return _read(source.path)
    except FileNotFoundError:
        return None


def object_cache_key(source: ObjectKey) -> bytes:
    """The key: the secret's digest, or the key file's (made now when there is none)."""
    if isinstance(source, GivenKey):
        given = source.secret
        if len(given) < 16:
            raise ConfigError(f"is {len(given)} characters long; an object cache key needs at "
                              "least 16", key=f"${OBJECT_KEY_VARIABLE}")
        try:
            return hashlib.sha256(given.encode()).digest()
        except UnicodeEncodeError:
            raise ConfigError("is not UTF-8 text; an object cache key is text (a CI secret of "
                              "16 or more characters)", key=f"${OBJECT_KEY_VARIABLE}") from None
    path = source.path
    try:
        return _read(path)
    except FileNotFoundError:
        pass
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(secrets.token_hex(32) + "\n")
        try:
            os.link(partial, path)  # whole or not at all; a build that made one first wins
        except FileExistsError:
            pass
        finally:
            partial.unlink()
    except OSError as exc:
        raise FactoryError(f"cannot make the object cache's key {path} ({exc.strerror}); set "
                           f"${OBJECT_KEY_VARIABLE} instead") from None
    return _read(path)


def _read(path: Path) -> bytes:
    """The key in `path`: a small regular file (not a link, a FIFO or a device), readable by
    its owner alone, holding the key in hex; FileNotFoundError where there is none."""
    try:
        data = read_regular(path, _KEY_FILE_LIMIT)
        mode = path.lstat().st_mode
    except FileNotFoundError:
        raise
    except OSError as exc:
        problem = "is a link" if exc.errno == errno.ELOOP else exc.strerror
        raise ConfigError(f"cannot be read as the object cache's key ({problem}); remove it to "
                          "make another", file=path) from None
    if data is None:
        raise ConfigError("is not a small regular file, so it cannot be the object cache's key; "
                          "remove it to make another", file=path)
    if mode & 0o077:
        raise ConfigError(f"is readable by others (mode {stat.S_IMODE(mode):04o}); the object "
                          f"cache's key must be its owner's alone: chmod 600 {path}", file=path)
    try:
        key = bytes.fromhex(data.decode().strip())
    except ValueError as exc:
        raise ConfigError(f"cannot be read as the object cache's key ({exc}); remove it to "
                          "make another", file=path) from None
    if len(key) < 16:
        raise ConfigError("is too short to be the object cache's key; remove it to make "
                          "another", file=path)
    return key


def sign(key: bytes, *fields: object) -> str:
    """The HMAC-SHA256 (hex) of `fields` under `key`."""
    message = "\0".join(str(field) for field in fields).encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()
