"""The import gate: a wheel is installed into a throw-away environment made from the cell's
torch and imported there, and every op it registers must resolve.

The other gates read a wheel; this one loads it, which is how an "undefined symbol" (a shared
object that calls into another torch than the cell's) is caught before a user meets it. The
environment is the cell's torch environment plus a folder the wheel is installed into (by
`installer`, the reference wheel installer: its RECORD and metadata as pip would write them),
added as a site folder by the probe (probe.py), which runs in the interpreter of that torch
environment, wherever it lives: on this machine, in a builder container, in a torch image.
No GPU is needed: torch's CUDA libraries load without one.

What the probe reports is kept as the cell's `LoadReport`: the ops the wheel registers, and
whether torch.compile can trace each one (it has a fake/meta implementation).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any

from installer import install
from installer.destinations import SchemeDictionaryDestination
from installer.sources import WheelFile as InstallerWheel

from ..errors import BuildError
from ..system.process import (
    Log,
    OutputOverflow,
    ProcessError,
    TimedOut,
    bounded_run,
    kernel_environment,
)
from ..toolchain import CommandPrefix
from ..wheel.elf import demangle_text

__all__ = ["PROBE", "LoadReport", "OpReport", "importable_modules", "install_wheel",
           "load_problems", "load_wheel"]

PROBE = Path(__file__).with_name("probe.py")
_TIMEOUT = 600.0  # seconds: loading torch and a large shared object on a busy machine


@dataclass(frozen=True)
class OpReport:
    name: str  # ns::op or ns::op.overload
    resolves: bool
    keys: tuple[str, ...]  # dispatch keys with a kernel: CPU, CUDA, Meta, Composite...
    fake: bool  # torch.compile(fullgraph=True) can trace it
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "resolves": self.resolves, "keys": list(self.keys),
                "fake": self.fake, "error": self.error}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> OpReport:
        return cls(str(data["name"]), bool(data["resolves"]), tuple(data.get("keys") or ()),
                   bool(data["fake"]), data.get("error"))


@dataclass(frozen=True)
class LoadReport:
    """What loading a wheel with the cell's torch showed."""

    torch: str
    imported: tuple[str, ...]
    ops: tuple[OpReport, ...]
    error: str | None = None  # the first import that failed (the loader's message)
    # ops the import registered from modules outside the wheel (torch's own, lazily loaded)
    others: tuple[str, ...] = ()
    free_threaded: bool = False  # loaded by a free-threaded CPython
    gil_enabled_by: str | None = None  # there: the import that turned the GIL back on

    def to_json(self) -> dict[str, Any]:
        return {"torch": self.torch, "imported": list(self.imported),
                "ops": [op.to_json() for op in self.ops], "error": self.error,
                "others": list(self.others),
                **({"free_threaded": True, "gil_enabled_by": self.gil_enabled_by}
                   if self.free_threaded else {})}

    @classmethod
    def from_json(cls, data: Any) -> LoadReport | None:
        """A recorded report, or None for anything else (an older record, a damaged one)."""
        try:
            error = data.get("error")
            enabled_by = data.get("gil_enabled_by")
            return cls(str(data["torch"]), tuple(data["imported"]),
                       tuple(OpReport.from_json(op) for op in data["ops"]),
                       error["message"] if isinstance(error, dict) else error,
                       tuple(str(name) for name in data.get("others") or ()),
                       data.get("free_threaded") is True,
                       None if enabled_by is None else str(enabled_by))
        except (TypeError, KeyError, ValueError, AttributeError):
            return None

    def describe_ops(self) -> str:
        if not self.ops:
            return "registers no torch op"
        traceable = sum(op.fake for op in self.ops)
        return (f"{len(self.ops)} op(s), {traceable} with a fake implementation "
                f"(torch.compile-ready)")


def importable_modules(files: Iterable[str]) -> list[str]:
    """The top-level modules a wheel's files make importable: its packages (folders with an
    __init__.py) and its single-file modules (.py or extension modules)."""
    found = []
    for path in files:
        parts = PurePosixPath(path).parts
        top = parts[0]
        if top.endswith((".dist-info", ".data", ".libs")):
            continue
        if len(parts) == 2 and parts[1] == "__init__.py":
            found.append(top)
        elif len(parts) == 1 and (top.endswith(".py") or ".so" in top):
            found.append(top.split(".", 1)[0])
    return sorted(set(found))


def install_wheel(wheel: Path, folder: Path, python: str) -> Path:
    """Install `wheel` into `folder` (everything under it, as pip would lay it out for
    `python`); the site folder its modules are in."""
    site = folder / "site"
    scheme = {"purelib": str(site), "platlib": str(site), "headers": str(folder / "include"),
              "scripts": str(folder / "bin"), "data": str(folder / "data")}
    destination = SchemeDictionaryDestination(scheme, interpreter=python, script_kind="posix")
    with InstallerWheel.open(wheel) as source:
        install(source, destination, additional_metadata={"INSTALLER": b"kernel-wheel-factory"})
    return site


def load_wheel(wheel: Path, modules: list[str], python: str, folder: Path, log: Log,
               runs_in: CommandPrefix | None = None) -> LoadReport:
    """Install `wheel` into `folder` (made afresh), then import `modules` with `python` (the
    cell's torch interpreter; behind `runs_in` when it lives in a container that sees `folder`
    at the same path)."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    site = install_wheel(wheel, folder, python)
    probe = folder / PROBE.name
    shutil.copyfile(PROBE, probe)
    argv, cwd = (runs_in or CommandPrefix()).argv(
        [python, "-I", "-B", str(probe), str(site), *modules], folder)
    env = _gate_environment(folder, runs_in)
    log.step(f"loading {wheel.name} with {python}: import {', '.join(modules)}")
    try:
        completed = bounded_run(argv, _TIMEOUT, cwd=cwd, env=env)
    except TimedOut:
        raise BuildError(f"importing {wheel.name} did not finish in {_TIMEOUT:.0f} s") from None
    except OutputOverflow as exc:
        raise BuildError(f"importing {wheel.name}: {exc}; it was stopped") from None
    except ProcessError as exc:
        raise BuildError(f"{python} cannot be run ({exc})") from None
    report, outside, cuda = _parse(completed.stdout)
    if report is None:
        detail = (completed.stderr or completed.stdout).strip().splitlines()
        log.write(completed.stderr)
        raise BuildError(f"importing {wheel.name} with {python} crashed (exit "
                         f"{completed.returncode}): {detail[-1] if detail else 'no output'}")
    if report.ops and (outside or cuda):
        others = _registered_by_outside(python, probe, outside, cuda, folder, runs_in, env)
        report = replace(report, ops=tuple(op for op in report.ops if op.name not in others),
                         others=tuple(op.name for op in report.ops if op.name in others))
    for op in report.ops:
        log.write(f"   op {op.name}: kernels for {', '.join(op.keys) or 'no dispatch key'}; "
                  f"{'torch.compile can trace it' if op.fake else 'no fake implementation'}")
    if report.others:
        namespaces = sorted({name.split("::")[0] for name in report.others})
        log.write(f"   and {len(report.others)} op(s) that modules from outside the wheel "
                  f"registered when it loaded them (not the wheel's; namespaces "
                  f"{', '.join(namespaces)})")
    return report


def _gate_environment(folder: Path, runs_in: CommandPrefix | None) -> dict[str, str] | None:
    """What the wheel's import sees of the environment: it runs the kernel's own code, so the
    allow-list of kernel_environment, never the factory's own variables. Behind `docker exec`
    the environment is the client's (the container's is the runner's to set)."""
    return None if runs_in is not None and runs_in.prefix else kernel_environment(folder)


def _registered_by_outside(python: str, probe: Path, modules: list[str], cuda: bool,
                           folder: Path, runs_in: CommandPrefix | None,
                           env: dict[str, str] | None) -> set[str]:
    """The ops that importing `modules` (after torch, and starting CUDA when `cuda`) registers
    in a fresh interpreter of the cell's torch, without the wheel: not the wheel's. Nothing
    when that cannot be told (every op stays the wheel's, and the gate judges them all)."""
    argv, cwd = (runs_in or CommandPrefix()).argv(
        [python, "-I", "-B", str(probe), "--outside", *(["--cuda"] if cuda else []), *modules],
        folder)
    try:
        completed = bounded_run(argv, _TIMEOUT, cwd=cwd, env=env)
    except ProcessError:
        return set()
    lines = completed.stdout.strip().splitlines()
    try:
        return {str(name) for name in json.loads(lines[-1])} \
            if completed.returncode == 0 and lines else set()
    except (ValueError, TypeError):
        return set()


def _parse(stdout: str) -> tuple[LoadReport | None, list[str], bool]:
    """The probe's report (None when it gave none), the modules from outside the wheel its
    import loaded, and whether it started CUDA, from its last line."""
    lines = stdout.strip().splitlines()
    if not lines:
        return None, [], False
    try:
        data = json.loads(lines[-1])
    except ValueError:
        return None, [], False
    report = LoadReport.from_json(data)
    if report is None:
        return None, [], False
    outside = [str(name) for name in data.get("outside") or ()]
    cuda = data.get("cuda_started") is True
    if report.error is not None:
        report = replace(report, error=demangle_text(data["error"]["message"]))
    return report, outside, cuda


def load_problems(report: LoadReport, needs_gil: bool = False) -> list[str]:
    """What loading showed to be wrong, in a user's words. In a free-threaded CPython, an
    import that turns the GIL back on is one, unless the kernel declares `needs_gil`."""
    problems = []
    if report.error is not None:
        problems.append(f"import: {report.error}")
    if report.gil_enabled_by is not None and not needs_gil:
        problems.append(f"import: loading {report.gil_enabled_by} turned the GIL back on in "
                        "free-threaded CPython (an extension module that does not declare it "
                        "can run without it); declare Py_MOD_GIL_NOT_USED in the module, or "
                        "set needs-gil: true on the kernel in matrix.yaml")
    for op in report.ops:
        if not op.resolves:
            problems.append(f"import: the op {op.name} does not resolve ({op.error})")
        elif not op.keys:
            problems.append(f"import: the op {op.name} is declared, but no kernel of it is "
                            "registered for any device")
    return problems
