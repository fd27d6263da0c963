"""The package is the pipeline: a step imports only the steps before it (and the foundation
modules), never one after, so data flows forward only. Read from the sources' own imports."""

from __future__ import annotations

import ast

from ..conftest import REPO

FOUNDATION = {"errors", "defaults", "hub", "data", "system", "trust", "outputs", "values",
              "__init__"}
STEPS = ["policy", "config", "sources", "plan", "toolchain", "compile", "wheel", "prove",
         "cells", "index", "publish", "pipeline", "doctor", "ui", "cli", "__main__"]


def rank(module: str) -> int:
    """-1 for the foundation, else the step's place in the pipeline (`python -m factory` last)."""
    top = module.split(".")[0]
    return -1 if top in FOUNDATION else STEPS.index(top)


def imports_of(path) -> set[str]:
    """The factory modules a file imports, as dotted paths below factory/."""
    package = path.relative_to(REPO / "factory").with_suffix("").parts
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = list(package[:len(package) - node.level])
            target = ".".join([*base, *(node.module.split(".") if node.module else [])])
            names = [f"{target}.{alias.name}" if target else alias.name for alias in node.names]
            found.update(names if not node.module else [target])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("factory."):
            found.add(node.module.removeprefix("factory."))
    return found


def test_every_import_points_back_along_the_pipeline():
    backwards = []
    for path in sorted((REPO / "factory").rglob("*.py")):
        here = ".".join(path.relative_to(REPO / "factory").with_suffix("").parts)
        for target in imports_of(path):
            if target.split(".")[0] in ("", "__version__"):
                continue
            if rank(target) > rank(here) and target.split(".")[0] != here.split(".")[0]:
                backwards.append(f"{here} imports {target}")
    assert backwards == []


def test_the_foundation_imports_no_step():
    for name in sorted(FOUNDATION - {"data", "__init__", "__main__"}):
        module = REPO / "factory" / f"{name}.py"
        package = sorted((REPO / "factory" / name).rglob("*.py"))
        for path in [module] if module.exists() else package:
            targets = imports_of(path)
            assert all(rank(target) == -1 for target in targets), (path.name, targets)


def test_no_module_imports_itself_back():
    """No circle of imports, counting those inside functions: a module that needs one made of
    its own parts gets them from a kit both import (cells/job.py for the cell builders)."""
    modules = {}
    for path in sorted((REPO / "factory").rglob("*.py")):
        parts = path.relative_to(REPO / "factory").with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    graph = {name: sorted(target for target in imports_of(path) if target in modules
                          and target != name and not name.startswith(f"{target}."))
             for name, path in modules.items()}
    circles = []
    state: dict[str, str] = {}

    def visit(name: str, trail: list[str]) -> None:
        state[name] = "open"
        for target in graph[name]:
            if state.get(target) == "open":
                circles.append(" -> ".join([*trail[trail.index(target):], target]))
            elif target not in state:
                visit(target, [*trail, target])
        state[name] = "done"

    for name in modules:
        if name not in state:
            visit(name, [name])
    assert circles == []


def test_few_modules_stand_loose_at_the_top():
    """The top level holds the package's entry points and the few modules every step needs;
    the rest is grouped by what it serves (system/, trust/, outputs/, values/)."""
    loose = sorted(path.name for path in (REPO / "factory").glob("*.py"))
    assert loose == ["__init__.py", "__main__.py", "defaults.py", "doctor.py", "errors.py",
                     "hub.py"]
