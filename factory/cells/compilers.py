"""The toolchain rules of a cell applied to a build the factory does not write the commands of
(setup.py, pyproject): its compilers are wrappers (data/compilers/rewrite.py run as a program)
that rewrite each command as the rules say, note what they changed, and run the real compiler,
through the object cache where it serves the build (data/compilers/cached.py, whose broker is
broker.py).

The wrappers stand where a build looks for its compilers: CC and CXX; nvcc under a CUDA_HOME
of the build folder's own, whose every other entry is a link to the real toolkit (torch's
cpp_extension runs CUDA_HOME/bin/nvcc, so do projects asking for its version), in
PYTORCH_NVCC (cpp_extension's ninja builds) and first on the PATH.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from ..compile.commands import gpu_targets
from ..data.compilers.rewrite import DROPPED, Change
from ..errors import BuildError, FactoryError
from ..plan.model import Cell
from ..system.process import Log
from ..toolchain import Toolchain

__all__ = ["Wrapped", "install_wrapper", "log_changes", "rule_note", "wrap_compilers"]

_RECORD = "changes.jsonl"


@dataclass(frozen=True)
class Wrapped:
    """The variables that put a build's compilers behind the wrappers, and where the wrappers
    note their changes."""

    variables: dict[str, str]
    record: Path

    def changes(self) -> list[Change]:
        """Every change the wrappers noted, in order."""
        if not self.record.is_file():
            return []
        found: list[Change] = []
        for line in self.record.read_text("utf-8").splitlines():
            entry = json.loads(line)
            found.extend(Change(item["rule"], item["before"], item["after"])
                         for item in entry["changes"])
        return found


def wrap_compilers(cell: Cell, toolchain: Toolchain, work: Path, python: Path,
                   c_compiler: str, broker: str | None = None,
                   shard: bool = False) -> Wrapped | None:
    """Wrappers for the compilers of `cell`'s build in `work`, run by `python` (the build
    environment's interpreter), asking the object cache's `broker` (its socket) for each
    compile where one serves the build (with `shard`, the build of one --unit-shard: what is
    another shard's, and every link, gets an empty stand-in); None when no rule is in force and
    no broker serves."""
    if not cell.rules and broker is None:
        return None
    folder = work / "compilers"
    if folder.exists():
        shutil.rmtree(folder)
    (folder / "bin").mkdir(parents=True)
    record = folder / _RECORD
    rules = [rule.to_json() for rule in cell.rules]

    def wrapper(at: Path, real: str, nvcc: bool) -> str:
        return install_wrapper(folder, at, python, {
            "real": real if os.sep in real else shutil.which(real) or real, "nvcc": nvcc,
            "rules": rules, "record": str(record), "targets": gpu_targets(cell.sms),
            "broker": broker, "work": str(work), "shard": shard})

    cc = wrapper(folder / "bin" / Path(c_compiler).name, c_compiler, nvcc=False)
    variables = {"CC": cc, "CXX": cc if c_compiler == toolchain.cxx else
                 wrapper(folder / "bin" / Path(toolchain.cxx).name, toolchain.cxx, nvcc=False)}
    if toolchain.cuda is not None:
        real_home = toolchain.cuda.home
        home = folder / "cuda"
        (home / "bin").mkdir(parents=True)
        nvcc = wrapper(home / "bin" / "nvcc", str(toolchain.cuda.nvcc), nvcc=True)
        variables["PYTORCH_NVCC"] = nvcc
        if not toolchain.runs_in.prefix:  # the toolkit is on this machine: mirror it
            _mirror(real_home, home)
            variables.update(CUDA_HOME=str(home), CUDA_PATH=str(home))
        variables["PATH"] = str(home / "bin")
    return Wrapped(variables, record)


def install_wrapper(folder: Path, at: Path, python: Path, settings: dict[str, Any]) -> str:
    """A compiler wrapper at `at` with `settings` (the real compiler, the rules, the broker),
    run by `python` from the modules it copies into `folder`."""
    for module in ("rewrite.py", "cached.py"):
        if not (folder / module).is_file():
            (folder / module).write_text(resources.files("factory.data.compilers")
                                         .joinpath(module).read_text("utf-8"), "utf-8")
    # A shell script that Python reads too: the interpreter's path may be longer than a #!
    # line takes; -I -S keep the project's environment and site-packages out of it.
    at.write_text(f'#!/bin/sh\n"exec" "{python}" "-I" "-S" "$0" "$@"\n'
                  f"import sys\nsys.path.insert(0, {str(folder)!r})\n"
                  "import rewrite\nrewrite.main()\n", "utf-8")
    at.chmod(0o755)
    at.with_name(at.name + ".json").write_text(json.dumps(settings), "utf-8")
    return str(at)


def _mirror(real: Path, home: Path) -> None:
    """Links in `home` (and its bin/) to every entry of the toolkit at `real`, but nvcc."""
    for entry in sorted(real.iterdir()):
        if entry.name != "bin":
            (home / entry.name).symlink_to(entry)
    for entry in sorted((real / "bin").iterdir()):
        if entry.name != "nvcc" and not (home / "bin" / entry.name).exists():
            (home / "bin" / entry.name).symlink_to(entry)


def log_changes(log: Log, changes: Iterable[Change], where: str) -> list[str]:
    """One log line per rule that changed something (what it changed, how often), returned
    as the provenance keeps them."""
    counted = Counter((change.rule, change.before, change.after) for change in changes)
    by_rule: dict[str, list[str]] = {}
    dropped: dict[str, dict[str, int]] = {}
    for (rule, before, after), count in counted.items():
        if after == DROPPED:  # -gencode arch=compute_75,code=sm_75: named by its code
            dropped.setdefault(rule, {})[before.rpartition("code=")[2]] = count
        else:
            by_rule.setdefault(rule, []).append(f"{before} -> {after} ({count}x)")
    for rule, codes in dropped.items():
        by_rule.setdefault(rule, []).append(
            f"dropped the -gencode entries of {', '.join(codes)} ({max(codes.values())}x)")
    lines = [f"{rule}: {'; '.join(items)}" for rule, items in by_rule.items()]
    for line in lines:
        log.write(f"toolchain rule {line}, in {where}")
    return lines


def rule_note(failure: FactoryError, changes: list[Change], cell: Cell) -> FactoryError:
    """A failed build's error with the rules that had changed its commands named after the
    compiler's own message, so the reader knows the build was not run as the project wrote it."""
    names = list(dict.fromkeys(change.rule for change in changes))
    if not names:
        return failure
    described = "; ".join(rule.summary for rule in cell.rules if rule.name in names)
    error = BuildError(f"{failure} (built under toolchain rule {described}: turn it off for "
                       "this kernel with toolchain-rules: [{name: ..., off: true}] in the matrix "
                       "if the project cannot build with it)")
    error.__cause__ = failure
    return error
