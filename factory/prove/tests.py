"""`factory test`: a kernel's own tests (its tests/ folder) run against the wheel built for a
cell, in a fresh environment beside the cell's torch that holds the wheel, its other
requirements and pytest (testenv.py), and the verdict they give the wheel.

The tests run from a copy of tests/ alone, so the kernel's source tree cannot shadow the
installed wheel. Tests that load the kernel through the `kernels` package (`get_kernel(
"org/name")`, any repo id) get the installed wheel from a stand-in module (inject/kernels.py).
The factory's pytest plugin (inject/_kernel_wheel_factory_pytest.py) runs what can run: a file
that cannot be collected for want of a module, or a GPU, is named and the others run; a test
file that is a script runs as one; where the matrix chose no tests, the kernel's own CI tests
(marked kernels_ci) are chosen, else every test function once and more cases until the
budget is spent. Where the machine has no GPU, a test that fails only because CUDA cannot
start is counted as skipped, with that reason.

The verdict: `proven` (tests ran and passed), `untested` (they could not start, or none ran,
with the reason) or `failed` (a test failed, or a file could not be collected for an error of
its own).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from .. import defaults
from ..config.model import ALL_TESTS, TestSelection
from ..errors import BuildError
from ..outputs.files import read_small_json
from ..system.process import (
    Log,
    OutputOverflow,
    TimedOut,
    bounded_run,
    kernel_environment,
    streamed_run,
)
from ..toolchain import CommandPrefix
from ..toolchain.torch import TorchEnv
from .inject._kernel_wheel_factory_gpu import NO_GPU
from .testenv import TestEnvUnavailable, make_test_env, test_requirements

__all__ = ["VERDICTS", "FileNote", "TestReport", "Verdict", "chosen_outside", "make_tests_env",
           "run_in_tests_env", "run_scripts", "run_tests", "script_tests"]

INJECT = Path(__file__).with_name("inject")
PLUGIN = "_kernel_wheel_factory_pytest"
_TALLY_LIMIT = 64 * 2**10  # bytes: the plugin's tally is a few numbers and one test's id
_REPORT_LIMIT = 4 * 2**20  # bytes: the plugin's report, a note per file among its numbers
_ASKED_LIMIT = 64 * 2**10  # bytes of the repo ids the tests asked the stand-in for
_SCRIPT_LINES = 40  # of a failed script's output, written to the log as its failure
_GPU_MODULE = "_kernel_wheel_factory_gpu"

Verdict = Literal["proven", "untested", "failed"]
VERDICTS: tuple[Verdict, ...] = ("proven", "untested", "failed")
FileKind = Literal["error", "needs", "no-gpu", "no-tests", "unrunnable", "script"]
_FILE_KINDS: tuple[FileKind, ...] = ("error", "needs", "no-gpu", "no-tests", "unrunnable",
                                     "script")


@dataclass(frozen=True)
class FileNote:
    """What became of one test file that did not simply run: not collected (an error of its
    own, a module not installed, no GPU), no test in it, tests no fixture can call, or run as
    a script."""

    path: str
    kind: FileKind
    detail: str

    def describe(self) -> str:
        return f"{self.path}: {self.detail}"

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "detail": self.detail}

    @classmethod
    def from_json(cls, data: Any) -> FileNote | None:
        try:
            kind = next(kind for kind in _FILE_KINDS if kind == data["kind"])
            return cls(_printable(data["path"]), kind, _printable(data["detail"]))
        except (TypeError, KeyError, StopIteration):
            return None


def _printable(value: Any, limit: int = 300) -> str:
    if not isinstance(value, str):
        raise TypeError("not a string")
    return "".join(char for char in value if char.isprintable())[:limit]


@dataclass(frozen=True)
class TestReport:
    """How a kernel's tests went against one cell's wheel, and the verdict they give it."""

    __test__ = False  # not a test class, whatever pytest's collector thinks of the name

    passed: int
    failed: int
    errors: int
    skipped: int
    gpus: tuple[str, ...]  # the GPUs the tests could use (none: GPU tests skipped)
    seconds: float
    torch: str = ""
    selection: str = ""  # the tests matrix.yaml chose (TestSelection), '' for the default
    not_run: str = ""  # why the tests could not start ('' when they ran)
    files: tuple[FileNote, ...] = ()
    cases: tuple[int, int] | None = None  # cases that ran, of the runnable cases found
    how: str = ""  # how the cases were chosen, where not all of them
    stopped: str = ""  # why the run stopped before its last chosen case
    stand_ins: tuple[str, ...] = ()  # the repo ids get_kernel was asked for
    # a cuTile wheel's launches while its tests ran: served by its cubins, assembled from its
    # Tile IR, compiled by cuTile
    launches: tuple[int, int, int] | None = None

    @classmethod
    def untested(cls, reason: str, torch: str = "") -> TestReport:
        return cls(0, 0, 0, 0, (), 0.0, torch, not_run=reason)

    @property
    def verdict(self) -> Verdict:
        if self.failed or self.errors:
            return "failed"
        if self.passed and not self.not_run:
            return "proven"
        return "untested"

    @property
    def reason(self) -> str:
        """Why the tests prove nothing (untested), or what failed; '' when proven."""
        verdict = self.verdict
        if verdict == "failed":
            errors = [note for note in self.files if note.kind == "error"]
            if errors and not self.failed:
                return f"{errors[0].describe()}" + \
                    (f" (and {len(errors) - 1} more)" if len(errors) > 1 else "")
            return f"{self.failed} failed, {self.errors} error(s)"
        if verdict == "proven":
            return ""
        if self.not_run:
            return self.not_run
        if self.skipped:
            return f"no test ran: all {self.skipped} skipped"
        left = [note.describe() for note in self.files if note.kind != "script"]
        return "no test was collected" + (f" ({'; '.join(left[:2])})" if left else "")

    def describe(self) -> str:
        if self.not_run:
            return f"not run: {self.not_run}"
        where = f"on {', '.join(dict.fromkeys(self.gpus))}" if self.gpus else "with no GPU"
        errors = f", {self.errors} error(s)" if self.errors else ""
        chosen = f" (chosen: {self.selection})" if self.selection else ""
        text = (f"{self.passed} passed, {self.failed} failed{errors}, {self.skipped} skipped "
                f"{where} in {self.seconds:.1f} s{chosen}")
        if self.cases is not None and self.cases[0] < self.cases[1]:
            ran, found = self.cases
            text += f"; {ran:,} of {found:,} cases" + (f" ({self.how})" if self.how else "")
        left = [note for note in self.files if note.kind not in ("script", "error")]
        if left:
            text += f"; {len(left)} file(s) not run (see the log)"
        if self.launches is not None:
            served, assembled, compiled = self.launches
            text += (f"; cuTile launches: {served} served by the wheel's cubins, {assembled} "
                     f"assembled from its Tile IR, {compiled} compiled by cuTile")
        return text

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "passed": self.passed, "failed": self.failed, "errors": self.errors,
            "skipped": self.skipped, "gpus": list(self.gpus), "seconds": self.seconds,
            "torch": self.torch, "verdict": self.verdict}
        optional: dict[str, Any] = {
            "selection": self.selection, "not_run": self.not_run, "reason": self.reason,
            "files": [note.to_json() for note in self.files],
            "cases": list(self.cases) if self.cases else None, "how": self.how,
            "stopped": self.stopped, "stand_ins": list(self.stand_ins),
            "launches": dict(zip(_LAUNCHES, self.launches, strict=True))
            if self.launches is not None else None}
        return data | {key: value for key, value in optional.items() if value}

    @classmethod
    def from_json(cls, data: Any) -> TestReport | None:
        try:
            cases = data.get("cases")
            return cls(int(data["passed"]), int(data["failed"]), int(data["errors"]),
                       int(data["skipped"]), tuple(map(str, data["gpus"])),
                       float(data["seconds"]), str(data.get("torch", "")),
                       str(data.get("selection", "")), str(data.get("not_run", "")),
                       tuple(note for note in map(FileNote.from_json, data.get("files", ()))
                             if note is not None),
                       (int(cases[0]), int(cases[1])) if cases else None,
                       str(data.get("how", "")), str(data.get("stopped", "")),
                       tuple(map(str, data.get("stand_ins", ()))),
                       _launches(data.get("launches")))
        except (TypeError, KeyError, ValueError, AttributeError, IndexError):
            return None


_LAUNCHES = ("served", "assembled", "compiled")


def _launches(data: Any) -> tuple[int, int, int] | None:
    """A cuTile wheel's launch counts as a report (or the plugin) gives them; None for any
    other wheel. Each a count, or the whole is refused (TypeError, ValueError)."""
    if data is None:
        return None
    served, assembled, compiled = (int(data[key]) for key in _LAUNCHES)
    if min(served, assembled, compiled) < 0:
        raise ValueError("a negative count")
    return served, assembled, compiled


def run_tests(wheel: Path, tests: Path, module: str, torch: TorchEnv, folder: Path,
              cache: Path, log: Log, offline: bool = False,
              selection: TestSelection = ALL_TESTS, needs: tuple[str, ...] = (),
              wheelhouses: tuple[Path, ...] = (),
              runs_in: CommandPrefix | None = None) -> TestReport:
    """Make a fresh environment in `folder` beside `torch` with the wheel installed, and run
    the tests of the folder `tests` there with pytest (those `selection` chooses, within its
    time; behind `runs_in` when given); `module` is the kernel's import name, `needs` what its
    repo says its tests need, `wheelhouses` folders of wheels to install them from. A report
    that says why when the tests could not start (BuildError only for a suite that hung or
    crashed pytest)."""
    if folder.exists() and tests.is_dir():
        shutil.rmtree(folder)
    made = make_tests_env(wheel, tests, torch, folder / "env", cache, log, offline, selection,
                          needs, wheelhouses)
    if isinstance(made, TestReport):
        return made
    return run_in_tests_env(made, tests, module, folder, log, selection, runs_in)


def make_tests_env(wheel: Path, tests: Path, torch: TorchEnv, root: Path, cache: Path,
                   log: Log, offline: bool = False, selection: TestSelection = ALL_TESTS,
                   needs: tuple[str, ...] = (), wheelhouses: tuple[Path, ...] = ()
                   ) -> Path | TestReport:
    """The first half of run_tests, the one that needs the network and runs none of the
    kernel's code: a fresh environment at `root` beside `torch` with the wheel, what its tests
    need and the factory's plugin installed; its python. The report instead when there is
    nothing to test or the environment cannot be made."""
    if not tests.is_dir():
        log.write("   not tested: the kernel has no tests/ folder")
        return TestReport.untested("the kernel has no tests/ folder", torch.torch_version)
    _check_chosen(tests, selection)
    if root.exists():
        shutil.rmtree(root)
    root.parent.mkdir(parents=True, exist_ok=True)
    needed = test_requirements(wheel, needs, selection)
    log.step(f"making the test environment: torch {torch.torch_version}, "
             f"{' '.join(n.requirement for n in needed) or 'nothing more'}"
             + (f" (wheelhouses: {', '.join(map(str, wheelhouses))})" if wheelhouses else ""))
    try:
        site = make_test_env(root, torch, wheel, needed, cache, log, offline, wheelhouses)
    except TestEnvUnavailable as exc:
        log.write(f"   not tested: {exc}")
        return TestReport.untested(str(exc), torch.torch_version)
    for name in (f"{PLUGIN}.py", f"{_GPU_MODULE}.py", "kernels.py"):
        shutil.copyfile(INJECT / name, site / name)
    return root / "bin" / "python"


def run_in_tests_env(python: Path, tests: Path, module: str, folder: Path, log: Log,
                     selection: TestSelection = ALL_TESTS,
                     runs_in: CommandPrefix | None = None) -> TestReport:
    """The second half of run_tests, the kernel's own code: the tests of `tests`, copied into
    `folder` (where they may write), run by `python` of an environment make_tests_env made."""
    _check_chosen(tests, selection)
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copytree(tests, folder / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    facts, progress, asked = folder / "report.json", folder / "progress.json", folder / "asked"
    # short tracebacks: a long one formats every frame's arguments, and formatting hundreds of
    # failures' GPU tensors can take longer than the tests did
    argv = [str(python), "-m", "pytest", "-p", PLUGIN,
            "-p", "no:cacheprovider", "-rfEs", "--tb=short", "--rootdir", ".",
            "--continue-on-collection-errors", *selection.pytest_args()]
    env = _tests_environment(folder, module, selection)
    log.step(f"running the kernel's tests: {' '.join(argv[1:])}")
    started = time.monotonic()
    command, cwd = (runs_in or CommandPrefix()).argv(argv, folder)
    try:
        status = streamed_run(command, log, selection.timeout, env=env, cwd=cwd)
    except TimedOut:
        raise BuildError(f"the tests did not finish in {selection.timeout:.0f} s"
                         f"{_how_far(progress)} (a kernel's tests: {{timeout: ...}} in "
                         f"matrix.yaml gives them longer)") from None
    report = _report(facts, progress, time.monotonic() - started, status)
    report = run_scripts(report, script_tests(facts, folder / "tests"), argv[0], env, log,
                         started + selection.timeout, runs_in)
    report = replace(report, seconds=round(time.monotonic() - started, 1),
                     selection=selection.describe(), stand_ins=_asked(asked, module, log))
    for note in report.files:
        log.write(f"   {note.describe()}")
    return report


def _tests_environment(folder: Path, module: str, selection: TestSelection) -> dict[str, str]:
    """What the kernel's tests see of the environment: they are the kernel's own code, so
    none of the factory's secrets reach them; the plugin is told where its report goes and
    how to choose the cases."""
    env = kernel_environment(folder)
    env |= {"KERNEL_WHEEL_FACTORY_KERNEL": module,
            "KERNEL_WHEEL_FACTORY_TEST_REPORT": str(folder / "report.json"),
            "KERNEL_WHEEL_FACTORY_TEST_PROGRESS": str(folder / "progress.json"),
            "KERNEL_WHEEL_FACTORY_STAND_IN": str(folder / "asked")}
    if selection.spending is not None:
        env |= {"KERNEL_WHEEL_FACTORY_CHOOSE": "budget" if selection.chosen else "default",
                "KERNEL_WHEEL_FACTORY_BUDGET": str(selection.spending),
                "KERNEL_WHEEL_FACTORY_SEED": str(defaults.TEST_SEED)}
    return env


def script_tests(facts: Path, tests: Path) -> list[tuple[str, Path]]:
    """The script tests the plugin's report names for the factory to run: (the path it notes
    them by, the file), each a file inside the tests' folder (the report lies in the tests'
    reach: anything else is refused)."""
    data = read_small_json(facts, _REPORT_LIMIT)
    listed = data.get("scripts") if isinstance(data, dict) else None
    root = tests.resolve()
    found = []
    for entry in listed if isinstance(listed, list) else []:
        try:
            path, file = _printable(entry["path"]), Path(entry["file"]).resolve()
        except (TypeError, KeyError, ValueError, OSError):
            raise BuildError("the tests' report names a script it does not describe") from None
        if not file.is_relative_to(root) or not file.is_file():
            raise BuildError(f"the tests' report names a script outside the kernel's tests: "
                             f"{path}")
        found.append((path, file))
    return found


def run_scripts(report: TestReport, scripts: list[tuple[str, Path]], python: str,
                env: dict[str, str], log: Log, deadline: float,
                runs_in: CommandPrefix | None = None) -> TestReport:
    """Run each script test as its authors run it (`python FILE` from its folder, behind
    `runs_in`, before `deadline`) and count it in `report`: exit 0 passes, another exit fails
    (its last lines go to the log), a script that fails only for want of a GPU where there is
    none is skipped, and one still running at the deadline is stopped and skipped, without a
    verdict."""
    counts = {"passed": report.passed, "failed": report.failed, "skipped": report.skipped}
    details = {note.path: note for note in report.files}
    for path, file in scripts:
        started = time.monotonic()
        limit = deadline - started
        argv, cwd = (runs_in or CommandPrefix()).argv([python, str(file)], file.parent)
        log.write(f"$ python {path}")
        try:
            if limit < 1:
                raise TimedOut("no time was left", 0)
            done = bounded_run(argv, limit, defaults.LOG_OUTPUT_LIMIT, env=env, cwd=cwd,
                               merged=True)
        except TimedOut:
            counts["skipped"] += 1
            log.write(f"   skipped: the script did not end within the tests' time limit "
                      f"({max(limit, 0):.0f} s left): no verdict")
            continue
        except OutputOverflow as exc:
            counts["failed"] += 1
            log.write(f"   failed: {exc}; it was stopped")
            continue
        lines = [line for line in done.stdout.rstrip().splitlines() if line.strip()]
        said = next((line.strip() for line in reversed(lines) if NO_GPU.search(line)), None)
        if done.returncode == 0:
            counts["passed"] += 1
            last = _printable(lines[-1].strip(), 200) if lines else ""
            note = details.get(path)
            if note is not None:  # what it printed last, as the log's word that it ran
                details[path] = replace(note, detail=note.detail + (
                    f"; it ended with exit 0 after {time.monotonic() - started:.1f} s"
                    + (f", its last line: {last}" if last else "")))
        elif not report.gpus and said is not None:
            counts["skipped"] += 1
            log.write(f"   skipped: needs a GPU, and this machine has none ({said[:200]})")
        else:
            counts["failed"] += 1
            log.write("\n".join([f"python {file.name} ended with exit {done.returncode}; its "
                                 "last lines:", *lines[-_SCRIPT_LINES:]]))
    cases = report.cases
    if cases is not None and scripts:
        cases = (cases[0] + len(scripts), cases[1])
    return replace(report, passed=counts["passed"], failed=counts["failed"],
                   skipped=counts["skipped"], cases=cases,
                   files=tuple(details.get(note.path, note) for note in report.files))


def _asked(asked: Path, module: str, log: Log) -> tuple[str, ...]:
    """The repo ids the tests asked the stand-in `kernels` for, each said in the log."""
    try:
        text = asked.read_text(errors="replace")[:_ASKED_LIMIT] if asked.is_file() else ""
    except OSError:
        text = ""
    ids = tuple(dict.fromkeys(line for line in text.splitlines() if line))
    for repo_id in ids:
        log.write(f"   the tests asked kernels.get_kernel for '{repo_id}': given the kernel "
                  f"under test ({module})")
    return ids


def _how_far(progress: Path) -> str:
    """How far a suite stopped at its time limit got, from the plugin's tally: ': 12 of 416
    ended (11 passed, 1 failed), test_x.py::test_y[3] running', or nothing when it wrote none
    that reads as one (the file is in the tests' reach: read bounded, shown printable)."""
    tally = read_small_json(progress, _TALLY_LIMIT)
    try:
        chosen, ended = int(tally["chosen"]), int(tally["ended"])
        running = "".join(char for char in str(tally.get("running") or "")
                          if char.isprintable())
        counts = {key: int(tally[key]) for key in ("passed", "failed", "errors", "skipped")}
    except (ValueError, TypeError, KeyError):
        return ""
    words = {"passed": "passed", "failed": "failed", "errors": "error(s)", "skipped": "skipped"}
    outcomes = ", ".join(f"{count} {words[key]}" for key, count in counts.items() if count)
    where = f", {running[:200]} running" if running else ", pytest still reporting"
    return f": {ended} of {chosen} ended ({outcomes or 'none'}){where}"


def _check_chosen(tests: Path, selection: TestSelection) -> None:
    """Each chosen path must name a file or folder inside tests/ (pytest would only say that
    it found nothing to run)."""
    outside = chosen_outside(tests, selection.paths)
    if outside is not None:
        raise BuildError(f"the chosen tests '{outside}' are not in the kernel's tests/ folder")


def chosen_outside(tests: Path, paths: Iterable[str]) -> str | None:
    """The first of the chosen `paths` (files, folders, node ids) that names nothing inside
    the kernel's `tests` folder; None when all do."""
    root = tests.resolve()
    for path in paths:
        where = tests / path.split("::", 1)[0]
        if not where.exists() or not where.resolve().is_relative_to(root):
            return path
    return None


def _report(facts: Path, progress: Path, seconds: float, status: int) -> TestReport:
    """The plugin's report of the run (it lies in the tests' reach: read bounded, each field
    checked)."""
    data = read_small_json(facts, _REPORT_LIMIT)
    try:
        counts = {key: int(data[key]) for key in ("passed", "failed", "errors", "skipped")}
        if not isinstance(data["gpus"], list) or not isinstance(data["files"], list):
            raise TypeError("not a list")
        gpus = tuple(_printable(name, 100) for name in data["gpus"])
        files = tuple(note for note in map(FileNote.from_json, data["files"])
                      if note is not None)
        cases = (int(data["ended"]), int(data["collected"]))
        how, stopped, torch = (_printable(data.get(key) or "") for key in
                               ("how", "stopped", "torch"))
        launches = _launches(data.get("cutile"))
    except (TypeError, KeyError, ValueError):
        raise BuildError(f"pytest ended (exit {status}) without the factory's report of the "
                         f"run{_how_far(progress)}: see the log") from None
    return TestReport(counts["passed"], counts["failed"], counts["errors"], counts["skipped"],
                      gpus, round(seconds, 1), torch, files=files, cases=cases, how=how,
                      stopped=stopped, launches=launches)
