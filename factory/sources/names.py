"""Which distribution names a public index (PyPI) also has.

A kernel named like a PyPI project (causal-conv1d, mamba-ssm, einops) is shadowed or shadows:
pip given `--extra-index-url` takes the highest version from either index. The index's project
pages are read with pypi-simple; answers are kept in the cache folder for a day, so a plan and
the build after it ask once.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from .. import defaults
from ..errors import SourceError
from ..outputs.files import write_atomic
from .simple import read_failures, shown

__all__ = ["NAMES_FOLDER", "TakenName", "taken_names"]

NAMES_FOLDER = "names"


@dataclass(frozen=True)
class TakenName:
    """A distribution name the index has a project of."""

    name: str
    index: str
    newest: str | None  # its highest version (None: the project lists no file)


def taken_names(names: Iterable[str], index: str, cache: Path,
                say: Callable[[str], None] = lambda _: None) -> dict[str, TakenName]:
    """The names (as given) that `index` has a project of. A failed read raises SourceError."""
    book = cache / NAMES_FOLDER / f"{hashlib.sha256(index.encode()).hexdigest()[:16]}.json"
    try:
        read = json.loads(book.read_text())
    except (OSError, ValueError):
        read = None
    known: dict[str, Any] = read if isinstance(read, dict) else {}
    now = time.time()
    wanted = {name: str(canonicalize_name(name)) for name in names}
    stale = sorted({project for project in wanted.values()
                    if not _fresh(known.get(project), now)})
    if stale:
        say(f"checking {len(stale)} name(s) against {index}")
        known.update(_ask(index, stale, now))
        book.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(book, json.dumps(known, indent=1, sort_keys=True))
    return {name: TakenName(name, index, known[project]["newest"])
            for name, project in wanted.items() if known[project]["exists"]}


def _fresh(entry: object, now: float) -> bool:
    return isinstance(entry, dict) and isinstance(entry.get("checked"), (int, float)) and \
        isinstance(entry.get("exists"), bool) and \
        now - entry["checked"] < defaults.NAME_CHECK_TTL


def _ask(index: str, projects: list[str], now: float) -> dict[str, dict[str, Any]]:
    from pypi_simple import NoSuchProjectError, PyPISimple

    from .http import BoundedSession

    answers: dict[str, dict[str, Any]] = {}
    try:
        with BoundedSession(defaults.NAME_CHECK_DEADLINE) as session, \
                PyPISimple(endpoint=index, session=session) as api:
            for project in projects:
                try:
                    page = api.get_project_page(project, timeout=defaults.DOWNLOAD_TIMEOUT)
                except NoSuchProjectError:
                    answers[project] = {"checked": now, "exists": False, "newest": None}
                    continue
                answers[project] = {"checked": now, "exists": True,
                                    "newest": _newest(p.version for p in page.packages)}
    except read_failures() as exc:
        raise SourceError(f"cannot read {index} to check the wheels' names: "
                          f"{type(exc).__name__}: {shown(exc)}") from None
    return answers


def _newest(versions: Iterable[str | None]) -> str | None:
    parsed = []
    for text in versions:
        try:
            parsed.append(Version(text or ""))
        except InvalidVersion:
            continue
    return str(max(parsed)) if parsed else None
