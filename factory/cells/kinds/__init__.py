"""The kinds of kernel project, one package each behind one protocol (kind.py's Kind, whose
planner's half is plan/model.py's KindPlan): a kernel-builder repo that compiles, one of pure
Python (noarch), a setup.py / pyproject.toml extension (pep517) and a cuTile-Python project
(cutile). Each says how its cells are planned and recorded, built, held to what their wheels
must be and imported; base.py holds what a kind does unless it says otherwise. A new kind is a
new package here and one line of KINDS."""

from __future__ import annotations

from ...config.spec import KernelSpec, ProjectKind
from .cutile import CUTILE
from .kernel_builder import KERNEL_BUILDER
from .kind import Kind
from .noarch import NOARCH
from .pep517 import PEP517

__all__ = ["KINDS", "Kind", "kind_of"]

KINDS: dict[ProjectKind, Kind] = {kind.name: kind for kind in (KERNEL_BUILDER, NOARCH, PEP517,
                                                                CUTILE)}


def kind_of(spec: KernelSpec) -> Kind:
    """The kind of project a spec was read as."""
    return KINDS[spec.kind]
