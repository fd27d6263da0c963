"""`factory index` and `factory yank`: an output folder's index made anew (after merging other
folders and published indexes into it, with variant wheels where asked), checked against its
manifest, or a release yanked in it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from ..index.merge import is_url, merge_outputs
from ..index.records import load_manifest
from ..index.update import IndexSummary, update_index, verify_index, yank
from ..index.variants import make_variants
from ..outputs.layout import Layout
from ..trust.keys import existing_key
from .options import object_key

__all__ = ["IndexRequest", "IndexSummary", "IndexVerdict", "is_url", "make_index",
           "verify_published", "yank_release"]


@dataclass(frozen=True)
class IndexRequest:
    out: Path
    merge: tuple[str, ...] = ()  # output folders and index URLs to take in first
    force: bool = False  # accept a published wheel whose bytes changed
    variants: bool = False  # also publish each compiled wheel as a variant wheel


@dataclass(frozen=True)
class IndexVerdict:
    checked: int  # published files hashed
    problems: tuple[str, ...]


def make_index(request: IndexRequest) -> IndexSummary:
    """The index of `request.out` made anew, after the merge it asks for."""
    out, key = request.out, existing_key(object_key())
    if request.merge:
        sources: list[str | Path] = [source if is_url(source) else Path(source)
                                     for source in request.merge]
        summary = merge_outputs(out, sources, force=request.force, journal_key=key)
    else:
        summary = update_index(out, force=request.force, full=True, journal_key=key)
    if request.variants:
        layout = Layout(out)
        made = make_variants(layout.files, load_manifest(layout.manifest).files)
        if made:
            summary = update_index(out, force=request.force, published=made, journal_key=key)
    return summary


def verify_published(out: Path) -> IndexVerdict:
    """Every published file and page of `out` hashed against its manifest; nothing written."""
    if not out.is_dir():
        raise ConfigError("no such folder", file=out, key="--out")
    checked, problems = verify_index(out)
    return IndexVerdict(checked, tuple(problems))


def yank_release(out: Path, name: str, version: str, label: str | None,
                 reason: str) -> list[str]:
    """Mark the wheels of a release yanked in every index of `out` (or one cell's): their
    names."""
    if not Layout(out).files.is_dir():
        raise ConfigError("has no files/ folder: not an index", file=out, key="--out")
    return yank(out, name, version, label, reason, existing_key(object_key()))
