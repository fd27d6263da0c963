"""Which cells of a plan an index does not have yet (`--new INDEX`): a scheduled run builds
only the cells a new torch, CUDA or kernel version brings, and the merge keeps the rest.

A cell is there when the index lists a wheel of its distribution with its exact version (the
local label included) for its platform, and for a per-Python cell its CPython; a yanked wheel
counts (published files are immutable: the same name cannot be built again).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version as PackagingVersion

from ..errors import ConfigError
from ..outputs.layout import Layout
from ..plan.model import Cell, Plan
from .merge import is_url, read_published_index

__all__ = ["listed_wheels", "unpublished"]

_FREE_THREADED = re.compile(r"cp[0-9]+t")  # a free-threaded CPython's ABI tag


def listed_wheels(where: str) -> list[str]:
    """The wheel names the index at `where` lists: a published index's URL (none when it has
    no simple/ root yet), or a factory output folder."""
    if is_url(where):
        return list(read_published_index(where, key=None) or ())
    layout = Layout(Path(where))
    if not layout.files.is_dir() and not layout.manifest.is_file():
        raise ConfigError("is neither an index URL (http:// or https://) nor a factory output "
                          "folder", file=Path(where), key="--new")
    return sorted(path.name for path in layout.files.glob("*.whl")) \
        if layout.files.is_dir() else []


# (name, version) -> the (ABI, platform) tags of the wheels listed for it
Listed = dict[tuple[str, PackagingVersion], set[tuple[str, str]]]


def _has(cell: Cell, wheels: Listed) -> bool:
    tags = wheels.get((canonicalize_name(cell.distribution), PackagingVersion(cell.wheel_version)),
                      set())
    platform = "any" if cell.label is None else cell.platform
    # a per-Python cell's wheel has its CPython's ABI tag (cp312, cp314t); any other cell's
    # wheel is not a free-threaded one (abi3, none)
    return any(listed.endswith(platform) and
               (abi == cell.python_tag if cell.per_python else not _FREE_THREADED.fullmatch(abi))
               for abi, listed in tags)


def unpublished(plan: Plan, wheel_names: Iterable[str]) -> tuple[Plan, list[str]]:
    """The plan without the cells the index already has (skipped cells stay, with their
    reasons), and the ids of the cells left out."""
    wheels: Listed = {}
    for filename in wheel_names:
        try:
            name, version, _, tags = parse_wheel_filename(filename)
        except InvalidWheelFilename:
            continue  # not one of the factory's: it names no cell
        wheels.setdefault((name, version), set()).update(
            (tag.abi, tag.platform) for tag in tags)
    present = [cell.id for cell in plan.cells if _has(cell, wheels)]
    kept = {cell.id for cell in plan.cells} - set(present)
    return plan.select(kept | {skipped.id for skipped in plan.skipped}), present
