"""A remote object store: the object cache shared by machines (a fleet of runners, another
workflow, another CI), behind each machine's own object cache.

A unit the local cache does not hold is looked for there; what a machine compiles is put there
too. Under the store's prefix:

    e/<identity>/<key>   an input set seen for a unit's identity: {"object": key, "inputs": ...}
    r/<key>              the object's record, as the local cache keeps it (identity, source,
                         size, sha256, and the mac under the object cache's key)
    o/<sha256>           an object, named by its bytes
    h/<cell>/<key>       a holding: which unit of a cell the object is, for `factory plan`
                         (compile/held.py)

No name is ever read, changed and written back: an entry's name is its key (the hash of the
identity and the input set), a record's is the key it describes, an object's is its hash. So
two machines that write the same unit at once write the same names, each whole, and listing
e/<identity>/ gives every input set any machine has seen. Nothing is believed: an entry's key
must be its input set's, its record's mac must hold under this cache's key (a store shared
with builds under another key, or written by anyone else, serves nothing) and the object's
bytes must have the record's size and hash; what the store gives is read up to those sizes
only. What comes from the store is kept in the local cache marked as another machine's, so
builds compile a share of it again to compare (compile/objects.py).

A store that is down, slow or refusing costs one warning: the first call that fails turns it
off for the rest of the run, and every unit is compiled here.

Two kinds: S3 and S3-compatible stores (s3://BUCKET/PREFIX; boto3 with its own configuration:
credentials, region and AWS_ENDPOINT_URL from the environment or ~/.aws), and Redis
(redis://[:PASSWORD@]HOST[:PORT][/DB], rediss:// for TLS).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Callable
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit

from .. import defaults
from ..errors import ConfigError
from ..values.stores import s3_location

__all__ = ["READ_TIMEOUT", "Backend", "RemoteStore", "remote_store", "store_description"]

T = TypeVar("T")
_HEX = re.compile(r"[0-9a-f]{64}")
_CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 30.0
_ENTRIES = 32  # input sets read per identity, at most
_HOLDINGS = 1000  # holdings read per cell, at most (one listing of S3's)


class Backend(Protocol):
    """Names and their bytes in one store."""

    def get(self, name: str, limit: int) -> bytes | None:
        """The bytes under `name` (None: absent); ValueError when there are more than `limit`."""

    def put(self, name: str, data: bytes, listed: bool = False) -> None:
        """Keep `data` under `name`; `listed`: `names` of its folder must find it."""

    def names(self, prefix: str, limit: int) -> list[str]:
        """At most `limit` of the listed names in the folder `prefix` (ends with /)."""


def store_description(url: str) -> str:
    """The store's URL as the factory shows it: no password, no user."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


def remote_store(url: str, key: str, warn: Callable[[str], None],
                 timeout: float = READ_TIMEOUT) -> RemoteStore:
    """The store a URL names (`key`: where it was given, for a bad one's message); a call
    that waits longer than `timeout` seconds for it fails."""
    scheme = urlsplit(url).scheme
    if scheme == "s3":
        return RemoteStore(_S3(url, key, timeout), store_description(url), warn)
    if scheme in ("redis", "rediss"):
        return RemoteStore(_Redis(url, key, timeout), store_description(url), warn)
    raise ConfigError(f"'{store_description(url)}' is not an object store: s3://BUCKET/PREFIX "
                      "or redis://HOST:PORT/DB", key=key)


class RemoteStore:
    """The remote half of an object cache, for the stores of one run (thread-safe)."""

    def __init__(self, backend: Backend, description: str, warn: Callable[[str], None]) -> None:
        self.backend, self.description, self._warn = backend, description, warn
        self._down: str | None = None
        self._lock = threading.Lock()
        self._entries: dict[str, list[dict[str, Any]]] = {}
        self.taken = self.given = 0  # objects this run took from the store and put there

    @property
    def up(self) -> bool:
        return self._down is None

    def _call(self, what: str, call: Callable[[], T]) -> T | None:
        if self._down is not None:
            return None
        try:
            return call()
        except Exception as exc:  # any failure of a store is its being down
            with self._lock:
                first = self._down is None
                self._down = f"{what} failed ({type(exc).__name__}: {exc})"
            if first:
                self._warn(f"object store {self.description}: {self._down}; building without "
                           "it for the rest of this run (units it would have served are "
                           "compiled here)")
            return None

    def entries(self, identity: str, well_formed: Callable[[Any], list[dict[str, Any]]],
                key_of: Callable[[str, list[list[str]]], str]) -> list[dict[str, Any]]:
        """The input sets the store holds for `identity` whose names are their keys (read
        once per run)."""
        with self._lock:
            known = self._entries.get(identity)
        if known is not None:
            return known
        found: list[dict[str, Any]] = []
        for key, data in self._listed(f"e/{identity}/", _ENTRIES, "listing", "reading an entry"):
            entry = well_formed({"entries": [data]})
            if entry and entry[0]["object"] == key and key_of(identity, entry[0]["inputs"]) == key:
                found.extend(entry)
        with self._lock:
            self._entries[identity] = found
        return found

    def _listed(self, folder: str, limit: int, listing: str,
                reading: str) -> list[tuple[str, Any]]:
        """At most `limit` of the listed names in `folder`, each with its JSON as read (None:
        absent or not JSON), by name; nothing where the store is down (`listing` and `reading`
        say what failed)."""
        names = self._call(listing, lambda: self.backend.names(folder, limit))
        found = []
        for name in sorted(names or []):
            def read(name: str = name) -> bytes | None:
                return self.backend.get(name, defaults.MAX_RECORD_SIZE)

            found.append((name.rpartition("/")[2], _json(self._call(reading, read))))
        return found

    def record_and_object(self, key: str) -> tuple[dict[str, Any], bytes] | None:
        """An object's record and its bytes, read up to the sizes the record states and the
        bytes checked against its hash (its mac is the caller's to check)."""
        record = _json(self._call("reading a record", lambda: self.backend.get(
            f"r/{key}", defaults.MAX_RECORD_SIZE)))
        if not isinstance(record, dict):
            return None
        size, digest = record.get("size"), str(record.get("sha256"))
        if not isinstance(size, int) or not 0 < size <= defaults.MAX_OBJECT_SIZE or \
                not _HEX.fullmatch(digest):
            return None
        data = self._call("reading an object", lambda: self.backend.get(f"o/{digest}", size))
        if data is None or len(data) != size or hashlib.sha256(data).hexdigest() != digest:
            return None
        with self._lock:
            self.taken += 1
        return record, data

    def put(self, identity: str, entry: dict[str, Any], record: dict[str, Any],
            data: bytes) -> None:
        """Give the store an object, its record and its input set (the object first: a reader
        that finds the entry finds what it names)."""
        def write() -> bool:
            self.backend.put(f"o/{record['sha256']}", data)
            self.backend.put(f"r/{entry['object']}", json.dumps(record).encode())
            self.backend.put(f"e/{identity}/{entry['object']}", json.dumps(entry).encode(),
                             listed=True)
            return True  # written (a failed call gives None)

        if self._call("writing an object", write):
            with self._lock:
                self.given += 1
                self._entries.setdefault(identity, []).insert(0, entry)

    def hold(self, cell: str, key: str, data: bytes) -> None:
        """Give the store a holding of a cell's unit (compile/held.py)."""
        self._call("writing a holding",
                   lambda: self.backend.put(f"h/{cell}/{key}", data, listed=True))

    def holdings(self, cell: str) -> list[Any]:
        """The holdings the store has for a cell, as read (at most _HOLDINGS of them)."""
        return [data for _, data in self._listed(f"h/{cell}/", _HOLDINGS, "listing holdings",
                                                 "reading a holding")]


def _json(data: bytes | None) -> Any:
    if not data:
        return None
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None


class _S3:
    """s3://BUCKET/PREFIX through boto3, with short timeouts."""

    def __init__(self, url: str, key: str, timeout: float) -> None:
        try:
            import boto3
            from botocore.config import Config
        except ImportError:
            raise ConfigError("s3:// object stores need boto3: pip install "
                              "'kernel-wheel-factory[s3]'", key=key) from None
        self.bucket, self.prefix = s3_location(url)  # a URL object_store_problem let through
        try:
            self.client = boto3.client("s3", config=Config(
                connect_timeout=min(timeout, _CONNECT_TIMEOUT), read_timeout=timeout,
                retries={"max_attempts": 2}))
        except Exception as exc:  # botocore's configuration errors: a bad endpoint or region
            raise ConfigError(f"boto3 cannot make an S3 client here: {exc}", key=key) from None

    def get(self, name: str, limit: int) -> bytes | None:
        try:
            answer = self.client.get_object(Bucket=self.bucket, Key=self.prefix + name)
        except self.client.exceptions.NoSuchKey:
            return None
        if answer.get("ContentLength", 0) > limit:
            answer["Body"].close()
            raise ValueError(f"{name} is larger than {limit} bytes")
        data: bytes = answer["Body"].read(limit + 1)
        if len(data) > limit:
            raise ValueError(f"{name} is larger than {limit} bytes")
        return data

    def put(self, name: str, data: bytes, listed: bool = False) -> None:
        self.client.put_object(Bucket=self.bucket, Key=self.prefix + name, Body=data)

    def names(self, prefix: str, limit: int) -> list[str]:
        answer = self.client.list_objects_v2(Bucket=self.bucket, Prefix=self.prefix + prefix,
                                             MaxKeys=limit)
        return [item["Key"][len(self.prefix):] for item in answer.get("Contents", [])]


class _Redis:
    """redis:// through redis-py: each name a string, and a folder's listed names a set."""

    def __init__(self, url: str, key: str, timeout: float) -> None:
        try:
            import redis
        except ImportError:
            raise ConfigError("redis:// object stores need redis-py: pip install "
                              "'kernel-wheel-factory[redis]'", key=key) from None
        try:
            self.client = redis.Redis.from_url(
                url, socket_timeout=timeout,
                socket_connect_timeout=min(timeout, _CONNECT_TIMEOUT))
        except ValueError as exc:
            raise ConfigError(f"'{store_description(url)}' is not a Redis URL ({exc})",
                              key=key) from None

    def get(self, name: str, limit: int) -> bytes | None:
        data = self.client.getrange(name, 0, limit)  # at most limit + 1 bytes
        if not isinstance(data, bytes):  # the client decodes nothing: never text
            raise ValueError(f"{name}: the store answered text")
        if len(data) > limit:
            raise ValueError(f"{name} is larger than {limit} bytes")
        return data or None

    def put(self, name: str, data: bytes, listed: bool = False) -> None:
        with self.client.pipeline() as pipe:
            pipe.set(name, data)
            if listed:
                pipe.sadd(name.rpartition("/")[0] + "/", name)
            pipe.execute()

    def names(self, prefix: str, limit: int) -> list[str]:
        found: list[str] = []
        for name in self.client.sscan_iter(prefix, count=limit):
            found.append(name.decode(errors="replace"))
            if len(found) >= limit:
                break
        return found
