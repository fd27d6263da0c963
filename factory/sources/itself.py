"""Which commit of kernel-wheel-factory is running: what a caller of its reusable workflow pins
(`factory init --github`), since a tag can be moved and a commit cannot.

Read from what installed the factory: pip and uv record the commit of a git install in the
distribution's direct_url.json (PEP 610); a factory run from a git checkout (an editable
install, a clone) is at that checkout's HEAD. A wheel from an index records neither.
"""

from __future__ import annotations

import json
import re
from importlib import metadata
from pathlib import Path

from ..system.process import ProcessError, bounded_run

__all__ = ["COMMIT", "own_commit"]

COMMIT = re.compile(r"[0-9a-f]{40}")
_GIT_TIMEOUT = 20


def own_commit() -> str | None:
    """The full commit this factory was installed from, or None when nothing records it."""
    try:
        text = metadata.distribution("kernel-wheel-factory").read_text("direct_url.json")
        recorded = json.loads(text or "{}").get("vcs_info", {}).get("commit_id")
    except (metadata.PackageNotFoundError, ValueError, AttributeError):
        recorded = None
    if isinstance(recorded, str) and COMMIT.fullmatch(recorded):
        return recorded
    checkout = Path(__file__).resolve().parent.parent.parent
    if not (checkout / ".git").exists() or not (checkout / "pyproject.toml").is_file():
        return None
    try:
        done = bounded_run(["git", "-C", str(checkout), "rev-parse", "HEAD"], _GIT_TIMEOUT)
    except ProcessError:
        return None
    head = done.stdout.strip()
    return head if done.returncode == 0 and COMMIT.fullmatch(head) else None
