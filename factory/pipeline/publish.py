"""`factory publish`: an output folder's wheels to a PyPI-compatible registry (twine), or its
static index to a folder, s3:// or hf://; each wheel's name checked against the public index
first."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from ..config.model import CLASH_POLICIES, ClashPolicy, NameCheck
from ..errors import ConfigError, PublishError
from ..index.update import verify_index
from ..outputs.layout import Layout
from ..publish.registry import local_wheels, publish_to_registry
from ..publish.static import publish_static
from .names import check_names

__all__ = ["CLASH_POLICIES", "PublishRequest", "publish"]


@dataclass(frozen=True)
class PublishRequest:
    folder: Path
    cache: Path
    to: str | None = None  # a static target; else a registry
    repository_url: str | None = None
    repository: str | None = None  # a section of ~/.pypirc
    index_url: str | None = None  # the registry's simple index
    dry_run: bool = False
    name_clash: ClashPolicy = "warn"


def publish(request: PublishRequest, say: Callable[[str], None]) -> str:
    """Send what the target lacks (nothing, on a dry run); the line that sums it up."""
    if not request.folder.is_dir():
        raise ConfigError("no such folder", file=request.folder)
    _check_names(request, say)
    if request.to is not None:
        if request.index_url is not None:
            raise ConfigError("only applies to a registry, not with --to", key="--index-url")
        _check_index(request.folder)
        report = publish_static(request.folder, request.to, dry_run=request.dry_run, say=say)
        if request.to.startswith("hf://"):
            say("the Hub repo holds a package index for pip and uv; the kernels loader (0.17) "
                "takes a kernel from an organisation's Hub repo only when the organisation has "
                "the Hub's trusted-publisher flag, or when its caller passes "
                "trust_remote_code=True (or lists the repo in it)")
        return (f"{'would send' if request.dry_run else 'sent'} {len(report.sent)} file(s) to "
                f"{report.target}, {report.unchanged} unchanged")
    registry = publish_to_registry(request.folder, repository_url=request.repository_url,
                                   repository=request.repository, index_url=request.index_url,
                                   dry_run=request.dry_run, say=say)
    sent = "dry run: nothing uploaded" if request.dry_run else \
        f"uploaded {len(registry.uploaded)}"
    return (f"{sent}, {len(registry.skipped)} already there"
            + (f", {len(registry.yanked)} yanked left out" if registry.yanked else ""))


def _check_index(folder: Path) -> None:
    """A static index goes out only as its manifest gives it: a page, a file or a wheel that
    `factory index --verify` flags (a stale page a killed update left, a changed wheel) stops
    the publish before anything is sent. A folder that is no index is for publish_static to
    name."""
    if not Layout(folder).manifest.is_file():
        return
    _, problems = verify_index(folder)
    if problems:
        raise PublishError(f"{len(problems)} problem(s) in {folder}'s index, so nothing was sent; "
                           f"the first: {problems[0]} (factory index --verify lists them; "
                           "factory index puts the pages right)")


def _check_names(request: PublishRequest, say: Callable[[str], None]) -> None:
    """The name-clash guard on the wheels of the folder, before anything is sent."""
    if request.name_clash == "ignore" or not (request.folder / "files").is_dir():
        return
    newest: dict[str, str] = {}
    for wheel in local_wheels(request.folder)[0]:
        if wheel.project not in newest or \
                Version(wheel.version) > Version(newest[wheel.project]):
            newest[wheel.project] = wheel.version
    check_names(newest, NameCheck(request.name_clash), request.cache, False, say,
                lambda text: PublishError(f"{text}; nothing was sent"))
