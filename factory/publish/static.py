"""`factory publish --to TARGET`: an output folder's static index copied to a web root, an S3
bucket or a Hugging Face repo, without ever showing a reader a page that links a missing file.

The tree goes out in four waves, each finished before the next starts:

    1. files/            the wheels and their .metadata files (immutable)
    2. project pages     <label>/simple/<project>/, simple/<project>/, browse/<project>.json,
                         variants/<torch>/simple/<project>/ (with each release's variants.json)
    3. root pages        <label>/simple/index.*, simple/index.*, variants/<torch>/simple/index.*
    4. the browse page   index.html, browse.json, browse.css, browse.js, favicon.svg

A file the target already holds with the same bytes is not sent again. A wheel or metadata file
it holds with other bytes stops the publish before anything is sent: published files are
immutable there too. Pages are replaced in place. Nothing at the target is ever deleted, and
the factory's private records (.factory/) and the build logs (logs/) stay home.

On the Hub all changes go in one commit, which readers see whole or not at all.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import defaults
from ..errors import ConfigError, PublishError
from ..hub import hub_errors, parse_hf_target
from ..outputs.files import content_type, copy_atomic, file_sha256, remove_abandoned_temporaries
from ..outputs.layout import PRIVATE_FOLDERS, refuse_links
from ..values.stores import S3_BUCKET, s3_location

__all__ = ["StaticReport", "publish_static", "static_tree"]

WAVES = ("files", "project pages", "root pages", "browse page")


@dataclass
class StaticReport:
    target: str
    sent: list[str] = field(default_factory=list)
    unchanged: int = 0


def static_tree(out: Path) -> list[list[tuple[str, Path]]]:
    """The files of the static index in their waves, each wave sorted by path."""
    if not (out / "files").is_dir() or not (out / "simple" / "index.html").is_file():
        raise ConfigError("is not a factory index (no files/ and simple/index.html); build "
                          "or run 'factory index' first", file=out)
    waves: list[list[tuple[str, Path]]] = [[] for _ in WAVES]
    for folder, subfolders, names in os.walk(out):
        here = Path(folder)
        top = here == out
        subfolders[:] = sorted(d for d in subfolders
                               if not d.startswith(".") and not (top and d in PRIVATE_FOLDERS))
        for name in sorted(names):
            if name.startswith("."):
                continue
            path = here / name
            relative = path.relative_to(out).as_posix()
            waves[_wave(relative.split("/"))].append((relative, path))
    return waves


def _wave(parts: list[str]) -> int:
    if parts[0] == "files":
        return 0
    if parts[0] == "browse" and len(parts) == 2:
        return 1
    if "simple" in parts:
        depth = len(parts) - parts.index("simple")
        return 1 if depth >= 3 else 2
    return 3


class _Target:
    description: str

    def matches(self, relative: str, path: Path, digest: str) -> bool | None:
        """None: absent there; True: the same bytes; False: other bytes."""
        raise NotImplementedError

    def send(self, waves: list[list[tuple[str, Path, str]]]) -> None:
        raise NotImplementedError

    def tidy(self) -> None:
        """Clear what a killed publish left at the target (before anything is compared)."""


def open_target(spec: str, out: Path) -> _Target:
    if spec.startswith("s3://"):
        return _S3Target(spec)
    if spec.startswith("hf://"):
        return _HubTarget(spec)
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", spec):
        raise ConfigError(f"'{spec}' is not a folder, s3://BUCKET[/PREFIX] or "
                          "hf://[datasets/|spaces/]OWNER/NAME[@REVISION][/PATH]", key="--to")
    return _FolderTarget(Path(spec.removeprefix("file:")), out)


def publish_static(out: Path, spec: str, *, dry_run: bool,
                   say: Callable[[str], None]) -> StaticReport:
    target = open_target(spec, out)
    if not dry_run:
        target.tidy()
    report = StaticReport(target.description)
    plan: list[list[tuple[str, Path, str]]] = [[] for _ in WAVES]
    conflicts = []
    for number, files in enumerate(static_tree(out)):
        for relative, path in files:
            digest = file_sha256(path)
            same = target.matches(relative, path, digest)
            if same:
                report.unchanged += 1
            elif same is False and number == 0:
                conflicts.append(relative)
            else:
                plan[number].append((relative, path, digest))
    if conflicts:
        raise PublishError(f"{target.description} holds other bytes under {len(conflicts)} "
                           f"published name(s): {', '.join(conflicts[:5])}"
                           f"{' ...' if len(conflicts) > 5 else ''}; published files are "
                           "immutable, so nothing was sent")
    count = sum(len(wave) for wave in plan)
    say(f"{target.description}: {count} file(s) to send, {report.unchanged} already there")
    for name, wave in zip(WAVES, plan, strict=True):
        if wave:
            say(f"  {'would send' if dry_run else 'sending'} {name}: {len(wave)} file(s)")
    if not dry_run and count:
        target.send(plan)
    report.sent = [relative for wave in plan for relative, _, _ in wave]
    return report


class _FolderTarget(_Target):
    def __init__(self, root: Path, out: Path) -> None:
        resolved, source = root.resolve(), out.resolve()
        if resolved == source or source in resolved.parents or resolved in source.parents:
            raise ConfigError("is the output folder, or inside it, or holds it", file=root,
                              key="--to")
        if root.exists() and not root.is_dir():
            raise ConfigError("exists and is not a folder", file=root, key="--to")
        refuse_links(root, "publish target")
        self.root = root
        self.description = str(root)

    def matches(self, relative: str, path: Path, digest: str) -> bool | None:
        there = self.root / relative
        if not there.is_file():
            return None
        return there.stat().st_size == path.stat().st_size and file_sha256(there) == digest

    def tidy(self) -> None:
        if self.root.is_dir():
            remove_abandoned_temporaries(self.root)

    def send(self, waves: list[list[tuple[str, Path, str]]]) -> None:
        for wave in waves:
            for relative, path, _ in wave:
                destination = self.root / relative
                destination.parent.mkdir(parents=True, exist_ok=True)
                copy_atomic(path, destination)


class _S3Target(_Target):
    """boto3 with its usual configuration: credentials, region and AWS_ENDPOINT_URL (MinIO,
    R2 and other S3-compatible stores) from the environment or ~/.aws. Each object carries its
    sha256 as metadata, so later runs compare without downloading."""

    def __init__(self, spec: str) -> None:
        try:
            import boto3
            from boto3.s3.transfer import TransferConfig
        except ImportError:
            raise ConfigError("s3:// targets need boto3: pip install "
                              "'kernel-wheel-factory[s3]'", key="--to") from None
        bucket, self.prefix = s3_location(spec)
        if not S3_BUCKET.fullmatch(bucket):
            raise ConfigError(f"'{bucket}' is not an S3 bucket name", key="--to")
        self.bucket = bucket
        self.description = f"s3://{bucket}/{self.prefix}"
        try:
            self.client = boto3.client("s3")
        except Exception as exc:  # botocore's configuration errors: a bad endpoint or region
            raise ConfigError(f"boto3 cannot make an S3 client here: {exc}",
                              key="--to") from None
        self.transfer = TransferConfig(multipart_threshold=5 * 1024 ** 3)
        self._listing: dict[str, tuple[int, str]] | None = None

    def _call(self, what: str, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return function(*args, **kwargs)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            raise PublishError(f"{self.description}: {what} refused: {error.get('Code')} "
                               f"{error.get('Message', '')}".rstrip()) from None
        except BotoCoreError as exc:
            raise PublishError(f"{self.description}: {what} failed: {exc}") from None

    def listing(self) -> dict[str, tuple[int, str]]:
        if self._listing is None:
            self._listing = {}
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.prefix)
            for page in self._call("listing", list, pages):
                for item in page.get("Contents", []):
                    self._listing[item["Key"]] = (item["Size"], item["ETag"].strip('"'))
        return self._listing

    def matches(self, relative: str, path: Path, digest: str) -> bool | None:
        key = self.prefix + relative
        there = self.listing().get(key)
        if there is None:
            return None
        size, etag = there
        if size != path.stat().st_size:
            return False
        if "-" not in etag and etag == _md5(path):
            return True
        head = self._call("reading metadata", self.client.head_object, Bucket=self.bucket,
                          Key=key)
        recorded = head.get("Metadata", {}).get("sha256")
        if recorded:
            return bool(recorded == digest)
        body = self._call("download", self.client.get_object, Bucket=self.bucket, Key=key)
        return hashlib.sha256(body["Body"].read()).hexdigest() == digest

    def send(self, waves: list[list[tuple[str, Path, str]]]) -> None:
        def put(item: tuple[str, Path, str]) -> None:
            relative, path, digest = item
            self._call(f"upload of {relative}", self.client.upload_file, str(path),
                       self.bucket, self.prefix + relative, Config=self.transfer,
                       ExtraArgs={"ContentType": content_type(relative),
                                  "Metadata": {"sha256": digest}})

        with ThreadPoolExecutor(max_workers=defaults.PARALLEL_TRANSFERS) as pool:
            for wave in waves:
                list(pool.map(put, wave))  # a wave is complete before the next starts


class _HubTarget(_Target):
    """A Hub repo through huggingface_hub (HF_TOKEN, HF_ENDPOINT): every change in one commit."""

    def __init__(self, spec: str) -> None:
        from huggingface_hub import HfApi

        self.repo_type, self.repo_id, self.revision, self.prefix = \
            parse_hf_target(spec, key="--to")
        self.description = spec.rstrip("/")
        self.api = HfApi()
        self._listing: dict[str, tuple[int, str | None, str]] | None = None

    def _call(self, what: str, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        with hub_errors(self.repo_id, self.revision or "main",
                        where=f"{self.description}: {what} failed", refused=PublishError,
                        failed=PublishError,
                        access="or HF_TOKEN does not grant access to it; create it first, "
                               "with a token that may write to it"):
            return function(*args, **kwargs)

    def listing(self) -> dict[str, tuple[int, str | None, str]]:
        """path -> (size, LFS sha256 or None, git blob id)."""
        from huggingface_hub.hf_api import RepoFile

        if self._listing is None:
            from huggingface_hub.errors import EntryNotFoundError

            def tree() -> list[Any]:
                try:
                    return list(self.api.list_repo_tree(
                        self.repo_id, path_in_repo=self.prefix or None, recursive=True,
                        repo_type=self.repo_type, revision=self.revision))
                except EntryNotFoundError:  # PATH is not in the repo yet: nothing there
                    return []

            entries = self._call("listing", tree)
            self._listing = {}
            for entry in entries:
                if isinstance(entry, RepoFile):
                    lfs = entry.lfs.sha256 if entry.lfs else None
                    self._listing[entry.path] = (entry.size, lfs, entry.blob_id)
        return self._listing

    def _path(self, relative: str) -> str:
        return f"{self.prefix}/{relative}" if self.prefix else relative

    def matches(self, relative: str, path: Path, digest: str) -> bool | None:
        there = self.listing().get(self._path(relative))
        if there is None:
            return None
        size, lfs, blob = there
        if size != path.stat().st_size:
            return False
        if lfs is not None:
            return lfs == digest
        data = path.read_bytes()
        return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() == blob

    def send(self, waves: list[list[tuple[str, Path, str]]]) -> None:
        from huggingface_hub import CommitOperationAdd

        operations = [CommitOperationAdd(path_in_repo=self._path(relative),
                                         path_or_fileobj=str(path))
                      for wave in waves for relative, path, _ in wave]
        self._call("commit", self.api.create_commit, self.repo_id, operations=operations,
                   commit_message=f"Publish {len(operations)} index file(s)",
                   repo_type=self.repo_type, revision=self.revision)


def _md5(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
