"""The name-clash guard of `factory plan` and `factory publish`: the wheels' distribution names
looked up on the public index (PyPI, or the index name-clash: or KERNEL_WHEEL_FACTORY_NAME_INDEX
gives), and what a name found there means for an install.

PyPI refuses versions with a local label (1.0.0+cu130torch211), so a requirement pinned to the
labelled version can only be answered by the factory's index; uv asks the index given with
--index first and stops there. Either install command cannot be hijacked by a project of the
same name.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from pathlib import Path

from ..config.model import NameCheck
from ..errors import ConfigError, FactoryError, SourceError
from ..plan.model import Plan
from ..sources.names import TakenName, taken_names
from .options import name_index

__all__ = ["check_names", "check_plan_names", "clash_text"]


def clash_text(found: TakenName, version: str) -> str:
    """What a name taken on the public index means, and the install commands that still get
    the factory's wheel (`version`: one of its labelled versions)."""
    newest = f", newest {found.newest}" if found.newest else ""
    pinned = shlex.quote(f"{found.name}=={version}")
    return (f"{found.name}: {found.index} has a project of this name too{newest}; pip given "
            f"--extra-index-url takes the higher version from either index. Install pinned "
            f"(pip install {pinned} --extra-index-url CELL-INDEX) or with uv's --index, or "
            f"give the wheels another name (dist-name: in matrix.yaml)")


def check_names(versions: Mapping[str, str], check: NameCheck, cache: Path, offline: bool,
                say: Callable[[str], None],
                refuse: Callable[[str], FactoryError]) -> None:
    """Look the distribution names (each with one of its labelled versions) up; say what a
    taken one means, or raise `refuse(text)` when the policy refuses."""
    index = name_index(check)
    if check.policy == "ignore" or index is None or not versions:
        return
    if offline:
        say(f"note: --offline: the wheels' names are not checked against {index}")
        return
    try:
        taken = taken_names(versions, index, cache)
    except SourceError as exc:
        if check.policy == "refuse":
            raise
        say(f"warning: {exc}; the names are not checked")
        return
    for name in sorted(taken):
        text = clash_text(taken[name], versions[name])
        if check.policy == "refuse":
            raise refuse(f"{text} (name-clash: refuse)")
        say(f"warning: {text}")


def check_plan_names(plan: Plan, cache: Path, offline: bool,
                     say: Callable[[str], None]) -> None:
    matrix = plan.matrix
    versions: dict[str, str] = {}
    for cell in plan.cells:
        versions.setdefault(cell.distribution, cell.wheel_version)

    def refuse(text: str) -> FactoryError:
        return ConfigError(text, file=matrix.path, line=matrix.name_clash.line,
                           key="name-clash")

    check_names(versions, matrix.name_clash, cache, offline, say, refuse)

