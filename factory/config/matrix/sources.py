"""Where matrix.yaml fetches from: a kernel's path:, git: or hub: source, and depends:."""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import cast

from ...policy import dependency_release, dependency_releases
from ...trust.safety import leaves_root
from ..model import DEPENDENCY_KINDS, DependencyEntry, DependencyKind, SourceRequest
from ..nodes import Node
from ..project import project_kind
from ..spec import ProjectKind
from .fields import local_folder, refuse_url_credentials

__all__ = ["read_depends", "read_git_source", "read_hub_source", "read_path_source"]


_HUB_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")

_GIT_URL = re.compile(r"(https?|ssh|git|file)://\S+|[A-Za-z0-9_.-]+@[A-Za-z0-9_.-]+:\S+")


_REV = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./+@-]*")


def read_depends(node: Node, base: Path) -> tuple[DependencyEntry, ...]:
    """depends: {NAME: {git: URL, rev: REV} | {path: FOLDER} | {wheel: FILE} | {pypi: true}}"""
    entries = []
    for name, item in node.mapping().items():
        release = dependency_release(name)
        if release is None:
            known = ", ".join(sorted(dependency_releases()))
            raise item.error(f"unknown dependency '{name}' (the factory provides: {known})")
        if not isinstance(item.value, dict):
            raise item.error("expected a table with one of git:, path:, wheel: or pypi: true")
        kinds = [kind for kind in DEPENDENCY_KINDS if kind in item.value]
        if len(kinds) != 1:
            raise item.error("give exactly one of git: (a repository URL or folder, with rev:), "
                             "path: (a folder with the project's git layout), wheel: (a wheel "
                             "file) or pypi: true")
        kind = cast(DependencyKind, kinds[0])
        fields = item.table([kind, "rev"] if kind == "git" else [kind])
        if kind == "pypi":
            if fields["pypi"].value is not True:
                raise fields["pypi"].error("the only value is true (PyPI's wheel of the release)")
            if release.pypi is None:
                raise fields["pypi"].error(f"PyPI publishes no wheel of {release.project} "
                                           f"{release.version}; take it from git")
            entries.append(DependencyEntry(name, kind, release.pypi, line=item.line))
            continue
        if kind == "git":
            text, folder = _git_location(fields["git"], base)
        else:
            text = fields[kind].nonempty_str().strip()
            folder = local_folder(fields[kind], text, base)
            if kind == "path" and not folder.is_dir():
                raise fields[kind].error(f"folder '{text}' does not exist")
            if kind == "wheel" and not (folder.is_file() and folder.name.endswith(".whl")):
                raise fields[kind].error(f"'{text}' is not a wheel file (.whl)")
        rev = _rev(fields["rev"], release.tag) if "rev" in fields else None
        entries.append(DependencyEntry(name, kind, text, rev, folder, item.line))
    return tuple(entries)


def read_path_source(fields: dict[str, Node], base: Path,
                 stated: ProjectKind | None) -> SourceRequest:
    text = fields["path"].nonempty_str()
    folder = local_folder(fields["path"], text, base)
    if folder.exists() and not folder.is_dir():
        raise fields["path"].error(f"'{text}' is a file; give the kernel's folder")
    if not folder.is_dir():
        raise fields["path"].error(f"kernel folder '{text}' does not exist")
    if project_kind(folder, stated) is None:
        wanted = {None: "build.toml (kernel-builder) or setup.py / pyproject.toml (PEP 517)",
                  "kernel-builder": "build.toml", "pep517": "setup.py or pyproject.toml"}
        raise fields["path"].error(f"'{text}' has no {wanted[stated]}")
    return SourceRequest("path", Path(text).as_posix(), folder=folder)


def read_git_source(fields: dict[str, Node], base: Path,
                stated: ProjectKind | None = None) -> SourceRequest:
    url, folder = _git_location(fields["git"], base)
    return SourceRequest("git", url, _rev(fields.get("rev"), "HEAD"),
                         _subdir(fields.get("subdir")), folder)


def _git_location(node: Node, base: Path) -> tuple[str, Path | None]:
    """A `git:` value (a kernel's or a dependency's): the URL as written, and the folder when
    it names a local repository."""
    url = node.nonempty_str().strip().rstrip("/")
    refuse_url_credentials(node, url, "use a git credential helper instead")
    if _GIT_URL.fullmatch(url):
        return url, None
    if "://" in url or any(c.isspace() for c in url):
        raise node.error(f"'{url}' is not a git URL (https://, ssh://, git://, file://, "
                         "user@host:path or a local folder)")
    folder = local_folder(node, url, base)
    if not folder.is_dir():
        raise node.error(f"'{url}' is neither a git URL nor an existing folder")
    return url, folder


def read_hub_source(fields: dict[str, Node], base: Path,
                stated: ProjectKind | None = None) -> SourceRequest:
    repo = fields["hub"].nonempty_str().strip()
    if not _HUB_REPO.fullmatch(repo) or ".." in repo:
        raise fields["hub"].error(f"'{repo}' is not a Hugging Face repo id (org/name)")
    return SourceRequest("hub", repo, _rev(fields.get("revision"), "main"),
                         _subdir(fields.get("subdir")))


def _rev(node: Node | None, default: str) -> str:
    if node is None:
        return default
    text = node.scalar_text().strip()
    if not _REV.fullmatch(text) or ".." in text or text.endswith((".lock", "/")):
        raise node.error(f"'{text}' is not a branch, tag or commit name")
    return text


def _subdir(node: Node | None) -> str | None:
    if node is None:
        return None
    text = node.nonempty_str().strip()
    path = PurePosixPath(text)
    if leaves_root(text) or ".git" in path.parts or "\\" in text:
        raise node.error(f"'{text}' must be a folder inside the repository (relative, "
                         "without '..')")
    return None if path == PurePosixPath(".") else path.as_posix()
