"""What a front end (the command line, a workflow step) reads of its own arguments with the
factory's rules: the choices it offers, the values it parses, the options of a run. The steps
whose rules these are load when an argument first needs them, so that the command line starts
without them."""

from __future__ import annotations

from pathlib import Path

from ..config.model import (
    CLASH_POLICIES,
    PLATFORMS,
    RUNNERS,
    SITE_PRESETS,
    SizeLimit,
    parse_size_limit,
)
from ..plan.select import Selection, parse_selection

__all__ = ["CLASH_POLICIES", "PLATFORMS", "RUNNERS", "SITE_PRESETS", "Selection", "SizeLimit",
           "installed_pins", "is_url", "parse_selection", "parse_shard",
           "parse_size_limit", "wheelhouse_problem"]


def parse_shard(text: str) -> tuple[int, int]:
    """I/N: shard I of N."""
    from ..plan.jobs import parse_shard as parse

    return parse(text)


def is_url(source: str | Path) -> bool:
    """Whether an index is named by its http(s) URL, not a folder."""
    from ..index.merge import is_url as url

    return url(source)


def wheelhouse_problem(folder: Path) -> str | None:
    """Why a folder cannot serve as a wheelhouse, or None."""
    from ..config.wheelhouse import wheelhouse_problem as problem

    return problem(folder)


def installed_pins(text: str, path: Path) -> dict[str, str]:
    """name: version of each pin of a `pip freeze` read from `path`."""
    from ..prove.wheelhouse import installed_pins as pins

    return pins(text, path)

