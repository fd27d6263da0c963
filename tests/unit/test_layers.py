"""The package is the pipeline: a step imports only the steps before it (and the foundation
modules), never one after, so data flows forward only. Read from the sources' own imports."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from ..support.checks import present
from ..support.factory import REPO

FOUNDATION = {"errors", "defaults", "hub", "data", "system", "trust", "outputs", "values",
              "__init__"}
STEPS = ["policy", "config", "sources", "plan", "toolchain", "compile", "wheel", "prove",
         "cells", "index", "attest", "publish", "doctor", "pipeline", "ui", "cli", "__main__"]


def rank(module: str) -> int:
    """-1 for the foundation, else the step's place in the pipeline (`python -m factory` last)."""
    top = module.split(".")[0]
    return -1 if top in FOUNDATION else STEPS.index(top)


def imports_of(path: Path) -> set[str]:
    """The factory modules a file imports, as dotted paths below factory/."""
    package = path.relative_to(REPO / "factory").with_suffix("").parts
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = list(package[:len(package) - node.level])
            target = ".".join([*base, *(node.module.split(".") if node.module else [])])
            names = [f"{target}.{alias.name}" if target else alias.name for alias in node.names]
            found.update(names if not node.module else [target])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("factory."):
            found.add(present(node.module).removeprefix("factory."))
    return found


def test_every_import_points_back_along_the_pipeline() -> None:
    backwards = []
    for path in sorted((REPO / "factory").rglob("*.py")):
        here = ".".join(path.relative_to(REPO / "factory").with_suffix("").parts)
        for target in imports_of(path):
            if target.split(".")[0] in ("", "__version__"):
                continue
            if rank(target) > rank(here) and target.split(".")[0] != here.split(".")[0]:
                backwards.append(f"{here} imports {target}")
    assert backwards == []


def test_the_foundation_imports_no_step() -> None:
    for name in sorted(FOUNDATION - {"data", "__init__", "__main__"}):
        module = REPO / "factory" / f"{name}.py"
        package = sorted((REPO / "factory" / name).rglob("*.py"))
        for path in [module] if module.exists() else package:
            targets = imports_of(path)
            assert all(rank(target) == -1 for target in targets), (path.name, targets)


def test_no_module_imports_itself_back() -> None:
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


# Files run by another interpreter (a cell's torch, a kernel's test environment, a cuTile
# build environment, `doctor --python`), copied or named as files: they import nothing of the
# factory, so its rules of layers and errors do not reach them.
FOREIGN = {"doctor.py", "prove/probe.py", "prove/inject/_kernel_wheel_factory_pytest.py",
           "prove/inject/_kernel_wheel_factory_gpu.py", "prove/inject/kernels.py",
           "data/cutile/export.py", "data/cutile/runtime.py", "data/compilers/rewrite.py"}
_PROCESS_MODULES = {"subprocess", "multiprocessing", "pty"}


def _modules_imported(tree: ast.AST) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found


def _sources() -> list[tuple[str, ast.AST]]:
    return [(path.relative_to(REPO / "factory").as_posix(), ast.parse(path.read_text()))
            for path in sorted((REPO / "factory").rglob("*.py"))]


def test_only_system_starts_programs() -> None:
    """Every program starts through system/ (process.py; engine.py for docker), with a time
    limit and an output cap: no other module imports subprocess or starts one through os (an
    exec replaces the process it runs in, one already started and bounded: the compiler
    wrapper becomes the compiler). The wrapper's object cache client is the one other: it runs
    inside a project's build, which the factory started and bounds, and waits for the compiler
    it starts there to keep its object."""
    starting = set()
    for name, tree in _sources():
        if name.startswith("system/") or name == "data/compilers/cached.py":
            continue
        spawns = any(isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                     and node.value.id == "os" and (node.attr in ("system", "popen", "fork",
                                                                  "forkpty")
                                                    or node.attr.startswith(("spawn",
                                                                             "posix_spawn")))
                     for node in ast.walk(tree))
        if spawns or _modules_imported(tree) & _PROCESS_MODULES:
            starting.add(name)
    assert starting == set()


# What reads the machine: a file's text, bytes or metadata, a folder's listing, a path made
# absolute by the file system; and the factory's own readers of kernels and their files.
_READS = frozenset({"read_text", "read_bytes", "stat", "lstat", "rglob", "glob", "iterdir",
                    "exists", "is_file", "is_dir", "is_symlink", "resolve", "readlink", "walk",
                    "scandir", "listdir", "samefile", "realpath", "abspath", "getcwd", "cwd",
                    "home", "expanduser", "open"})
_WRITES = frozenset({"write_text", "write_bytes", "mkdir", "unlink", "rename", "replace",
                     "touch", "rmtree"})
_READERS = frozenset({"read_project", "project_kind", "read_build_toml", "static_version",
                      "read_facts", "read_symbols", "file_symbols", "scan_tree",
                      "source_files", "resolve_path_source", "load_matrix", "load_toml"})


def test_the_planner_is_pure() -> None:
    """plan/ turns values into values: it imports nothing that starts programs or touches the
    machine (system/, the output files' writers, shutil, tempfile), writes no file and reads
    none (what it needs of a kernel's files arrives read, as sources/facts.py's values), so
    every plan can be made, and tested, without a process or a disk."""
    impure = []
    for name, tree in _sources():
        if not name.startswith("plan/"):
            continue
        path = REPO / "factory" / name
        targets = imports_of(path)
        impure += [f"{name} imports {target}" for target in sorted(targets)
                   if target.split(".")[0] == "system" or target == "outputs.files"]
        impure += [f"{name} imports {module}" for module in sorted(
            _modules_imported(tree) & (_PROCESS_MODULES | {"shutil", "tempfile"}))]
        impure += [f"{name}:{node.lineno} imports {alias.name}" for node in ast.walk(tree)
                   if isinstance(node, ast.ImportFrom) for alias in node.names
                   if alias.name in _READERS]
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            called = node.func.attr if isinstance(node.func, ast.Attribute) else \
                node.func.id if isinstance(node.func, ast.Name) else ""
            writes = called in _WRITES and isinstance(node.func, ast.Attribute)
            if writes or called in _READS | _READERS:
                impure.append(f"{name}:{node.lineno} calls {called}")
    assert impure == []


def test_the_pipeline_prints_nothing() -> None:
    """pipeline/ does the work and returns what came of it: what it says goes through the
    Voice or the function it is handed, what a tool prints into the stream it is handed."""
    loud = []
    for name, tree in _sources():
        if not name.startswith("pipeline/"):
            continue
        loud += [f"{name}:{node.lineno} calls print" for node in ast.walk(tree)
                 if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                 and node.func.id == "print"]
        loud += [f"{name}:{node.lineno} names sys.{node.attr}" for node in ast.walk(tree)
                 if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                 and node.value.id == "sys" and node.attr in ("stdout", "stderr")]
    assert loud == []


def test_the_ui_renders_verdicts_it_does_not_reach_them() -> None:
    """ui/ shows what pipeline/ came to: it runs no gate of its own on a wheel."""
    judging = [f"{name} imports {target}" for name, _ in _sources() if name.startswith("ui/")
               for target in sorted(imports_of(REPO / "factory" / name))
               if target in ("wheel.gates", "wheel.expect")]
    assert judging == []


def test_every_error_is_a_factory_error() -> None:
    """An error class the factory defines is a FactoryError (the command line prints it as one
    line), whatever else it is."""
    from factory.errors import FactoryError

    loose = []
    for name, _ in _sources():
        if name in FOREIGN or name == "__main__.py" or name.startswith(("prove/inject/", "data/")):
            continue
        parts = ["factory", *name.removesuffix(".py").split("/")]
        module = importlib.import_module(".".join(parts[:-1] if parts[-1] == "__init__"
                                                  else parts))
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, BaseException) and \
                    value.__module__ == module.__name__ and not issubclass(value, FactoryError):
                loose.append(f"{name}: {value.__name__}")
    assert loose == []


def test_few_modules_stand_loose_at_the_top() -> None:
    """The top level holds the package's entry points and the few modules every step needs;
    the rest is grouped by what it serves (system/, trust/, outputs/, values/)."""
    loose = sorted(path.name for path in (REPO / "factory").glob("*.py"))
    assert loose == ["__init__.py", "__main__.py", "defaults.py", "doctor.py", "errors.py",
                     "hub.py"]


def test_no_function_runs_past_sixty_lines() -> None:
    """A function that does more than a screen's worth is cut into the steps it takes."""
    long = [f"{name}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for name, tree in _sources() for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno
            and node.end_lineno - node.lineno + 1 > 60]
    assert long == []


def test_the_command_line_reaches_the_steps_only_through_the_pipeline() -> None:
    """cli/ parses and renders: it imports the pipeline, ui/ and the foundation, never a step
    (each subcommand hands a request to one pipeline function)."""
    reached = [f"{name} imports {target}" for name, _ in _sources() if name.startswith("cli/")
               for target in imports_of(REPO / "factory" / name)
               if target.split(".")[0] not in ("", "__version__")
               and rank(target) != -1 and target.split(".")[0] not in ("pipeline", "ui", "cli")]
    assert reached == []


def _asks_a_kind(node: ast.AST) -> bool:
    """Whether `node` tells kinds of project apart: a spec's kind compared (`spec.kind ==`,
    `cell.spec.kind in (...)`), or its framework held against torch-noarch."""
    if not isinstance(node, ast.Compare):
        return False
    for side in (node.left, *node.comparators):
        if isinstance(side, ast.Attribute) and side.attr == "kind" and (
                (isinstance(side.value, ast.Name) and side.value.id == "spec") or
                (isinstance(side.value, ast.Attribute) and side.value.attr == "spec")):
            return True
        if isinstance(side, ast.Constant) and side.value == "torch-noarch":
            return True
    return False


def test_only_the_kinds_tell_kinds_of_project_apart() -> None:
    """A kind of kernel project is one package of cells/kinds/: every other module asks the
    kind (its protocol) and never which kind it is; config/ reads the files that say so."""
    asked = []
    for name, tree in _sources():
        if name.startswith(("cells/kinds/", "config/")):
            continue
        asked += [f"{name}:{node.lineno}" for node in ast.walk(tree)
                  if isinstance(node, ast.Compare) and _asks_a_kind(node)]
        asked += [f"{name}:{node.lineno}" for node in ast.walk(tree)
                  if isinstance(node, ast.Attribute) and node.attr in (
                      "is_pep517", "is_cutile", "is_noarch")]
    assert asked == []
