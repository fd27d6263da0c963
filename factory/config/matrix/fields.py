"""Values several sections of matrix.yaml take: lists, choices, folders, index URLs, versions."""

from __future__ import annotations

import re
from pathlib import Path
from typing import cast

from ...trust.credentials import refuse_credentials
from ...values.versions import Version, parse_release
from ..model import COMPRESS_MODES, CompressMode, SizeLimit, is_project_name, parse_size_limit
from ..nodes import Node

__all__ = ["local_folder", "nonempty_list", "read_choice", "read_compress", "read_image_reference",
           "read_index_url", "read_project_name", "read_size_limit", "read_torch_index",
           "read_version", "refuse_url_credentials"]


def nonempty_list(node: Node) -> list[Node]:
    items = node.list()
    if not items:
        raise node.error("must not be empty")
    return items


def read_index_url(node: Node, files: bool = False,
               advice: str = "a netrc file gives them to the factory") -> str:
    """A simple index's URL (`files`: or a file:// one), without credentials (`advice` says
    where they go instead)."""
    index = node.nonempty_str()
    refuse_url_credentials(node, index, advice)
    if not re.match(r"(https?|file)://" if files else r"https?://", index):
        schemes = "http://, https:// or file://" if files else "http:// or https://"
        raise node.error(f"'{index}' is not an index URL ({schemes})")
    return index


def read_project_name(node: Node) -> str:
    """A project's name, as a requirement names it (transformers, py-cpuinfo)."""
    text = node.nonempty_str()
    if not is_project_name(text):
        raise node.error(f"'{text}' is not a project name (give the name alone, e.g. numpy)")
    return text


def read_compress(node: Node) -> CompressMode:
    return cast(CompressMode, read_choice(node, COMPRESS_MODES, "GPU code compression"))


def read_choice(node: Node, known: tuple[str, ...], what: str) -> str:
    """A value that must be one of `known`."""
    value = node.str()
    if value not in known:
        raise node.error(f"unknown {what} '{value}' (known: {', '.join(known)})")
    return value


def read_size_limit(node: Node) -> SizeLimit:
    try:
        return parse_size_limit(node.scalar_text())
    except ValueError as exc:
        raise node.error(str(exc)) from None


def local_folder(node: Node, text: str, base: Path) -> Path:
    """A folder the matrix names, relative to the matrix, resolved."""
    if "\0" in text:
        raise node.error("the path holds a NUL byte")
    try:
        return (base / Path(text).expanduser()).resolve()
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop (Python < 3.13)
        raise node.error(f"'{text}' cannot be followed ({exc})") from None


def refuse_url_credentials(node: Node, url: str, instead: str) -> None:
    refuse_credentials(url, key=node.key, file=node.file, line=node.line, instead=instead)


def read_version(node: Node) -> Version:
    try:
        return parse_release(node.scalar_text())
    except ValueError as exc:
        raise node.error(str(exc)) from None


def read_torch_index(node: Node) -> str:
    return read_index_url(node, True,
                          "give them to uv through UV_INDEX_* variables or a netrc file")


_IMAGE_REFERENCE = re.compile(r"[a-z0-9][a-z0-9._/:{}-]*(@sha256:[0-9a-f]{64})?")


def read_image_reference(node: Node, hint: str, template: bool = True) -> str:
    text = node.nonempty_str()
    if not _IMAGE_REFERENCE.fullmatch(text) or (not template and ("{" in text or "}" in text)):
        raise node.error(f"'{text}' is not an image reference (name[:tag][@sha256:digest]; "
                         f"{hint})")
    return text
