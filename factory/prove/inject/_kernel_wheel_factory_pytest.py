"""pytest plugin of `factory test` (loaded with -p): it runs what can run of a kernel's own tests
and says what it did, in files the factory reads.

- A test that fails only because this machine has no GPU (CUDA cannot start) is reported as
  skipped, with the reason, instead of failed.
- A test file that cannot be collected is noted with its reason: a module that is not installed
  (not the kernel's own), no GPU, or an error (counted as one); the other files still run.
- A test whose parameters no fixture or parametrization gives (a script's function that its
  `__main__` block calls with arguments) is not a pytest test: it is left out, and named.
- A file left with no test that has an `if __name__ == "__main__":` block (one that does not
  just call unittest.main or pytest.main) is a script: when chosen, it is named in the report
  ("scripts"), and the factory runs it after pytest as its authors run it (`python FILE`, from
  its folder, within the suite's time limit); it passes when it exits with 0.
- With $KERNEL_WHEEL_FACTORY_CHOOSE=default (the matrix chose no tests), the tests marked
  `kernels_ci` are chosen where there are any; otherwise, and with =budget (the matrix's choice
  within a budget), every test function runs once (its first parameter set), then its other
  cases in a seeded order until $..._BUDGET seconds are spent.
- A running tally goes to $KERNEL_WHEEL_FACTORY_TEST_PROGRESS after each test (a suite killed
  at its time limit still says how far it got), the final report (counts, the GPUs, the notes
  per file, how the cases were chosen) to $KERNEL_WHEEL_FACTORY_TEST_REPORT.
"""

from __future__ import annotations

import json
import os
import random
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from _kernel_wheel_factory_gpu import NO_GPU as _NO_GPU

HAS_GPU = torch.cuda.is_available()
_MISSING_MODULE = re.compile(r"No module named '([^']+)'")
_MAIN_BLOCK = re.compile(r"""^if\s+__name__\s*==\s*['"]__main__['"]\s*:""", re.MULTILINE)
# A __main__ block that hands the file to a test runner runs no more than pytest collected.
_RUNNER = re.compile(r"\b(unittest|pytest)\.main\s*\(")
MARKER = "kernels_ci"
_ENV = os.environ
KERNEL = _ENV.get("KERNEL_WHEEL_FACTORY_KERNEL", "")
# default: the kernel's CI tests, else every function once and more cases within the budget;
# budget: the matrix's choice, within the budget
CHOOSE = _ENV.get("KERNEL_WHEEL_FACTORY_CHOOSE", "")
BUDGET = float(_ENV.get("KERNEL_WHEEL_FACTORY_BUDGET") or 0)
SEED = int(_ENV.get("KERNEL_WHEEL_FACTORY_SEED") or 0)


def _duration(seconds: float) -> str:
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return (lines[0] if lines else "")[:200]


def _error_line(text: str) -> str:
    """The line that names the error in a pytest report: the last 'E   ...' line."""
    found = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
    return (found[-1] if found else _first_line(text))[:200]


class _Run:
    """What this session did, counted the way pytest's JUnit report counts it: a failing setup
    or teardown is an error, an expected failure a skip."""

    def __init__(self) -> None:
        self.counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
        self.files: dict[str, dict[str, str]] = {}  # path: {kind, detail}
        self.collected = 0  # runnable cases found
        self.chosen = 0  # of those, chosen to run
        self.in_pytest = 0  # of those, run by pytest (the rest are scripts the factory runs)
        self.scripts: list[dict[str, str]] = []  # {path, file} of each chosen script
        self.ended = 0
        self.running = ""
        self.how = ""
        self.first = 0  # the chosen cases that run whatever the budget
        self.stopped = ""
        self.started = time.monotonic()
        self.session: pytest.Session | None = None

    def note_file(self, path: str, kind: str, detail: str) -> None:
        if kind == "error":
            self.counts["errors"] += 1
        self.files.setdefault(path, {"kind": kind, "detail": detail})

    def note(self, report: pytest.TestReport) -> None:
        if report.when == "call":
            self.counts[report.outcome] += 1
        elif report.failed:
            self.counts["errors"] += 1
        elif report.skipped:  # skipped in setup: the test never ran
            self.counts["skipped"] += 1
        if report.when == "teardown":  # written once a test has ended, not at every phase
            self.ended += 1
            self.running = ""
            self.tally()

    def tally(self) -> None:
        target = _ENV.get("KERNEL_WHEEL_FACTORY_TEST_PROGRESS")
        if target:
            _write(target, {**self.counts, "chosen": self.chosen, "ended": self.ended,
                            "running": self.running})

    def report(self) -> dict[str, Any]:
        gpus = [torch.cuda.get_device_name(n) for n in range(torch.cuda.device_count())] \
            if HAS_GPU else []
        return {**self.counts, "gpus": gpus, "torch": torch.__version__,
                "cuda": torch.version.cuda, "collected": self.collected, "chosen": self.chosen,
                "ended": self.ended, "how": self.how, "stopped": self.stopped,
                "files": [{"path": path, **note} for path, note in sorted(self.files.items())],
                "scripts": self.scripts, **_cutile_launches()}


def _cutile_launches() -> dict[str, Any]:
    """How the launches of a cuTile wheel's kernels were served while the tests ran: by the
    wheel's cubins, assembled from its Tile IR, or compiled by cuTile (the counts its loader,
    <package>._kernel_wheel_factory_cutile, keeps); nothing for any other wheel."""
    found: dict[str, int] = {}
    for name, module in list(sys.modules.items()):
        counts = getattr(module, "counts", None)
        if name.endswith("._kernel_wheel_factory_cutile") and isinstance(counts, dict):
            for key in ("served", "assembled", "compiled"):
                found[key] = found.get(key, 0) + int(counts.get(key, 0))
    return {"cutile": found} if found else {}


def _write(target: str, data: dict[str, Any]) -> None:
    # a fresh file renamed over the old one: the factory never reads half a report
    partial = f"{target}.part"
    with open(partial, "w", encoding="utf-8") as handle:
        json.dump(data, handle)
    os.replace(partial, target)


RUN = _Run()


class ScriptItem(pytest.Item):
    """A test file that is a script: chosen like any test, then handed to the factory, which
    runs it after pytest (see the module's text)."""

    def runtest(self) -> None:
        raise AssertionError("a script runs after pytest, not in it")

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"python {self.path.name}"


class ScriptFile(pytest.File):
    def collect(self) -> list[pytest.Item]:
        return [ScriptItem.from_parent(self, name="__main__")]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MARKER}: the tests a kernel's own CI runs")


def pytest_sessionstart(session: pytest.Session) -> None:
    RUN.session = session
    RUN.started = time.monotonic()


def pytest_collectreport(report: pytest.CollectReport) -> None:
    path = report.nodeid.split("::", 1)[0]
    if not report.failed or not path:
        return
    text = str(report.longrepr)
    missing = _MISSING_MODULE.findall(text)
    if missing and missing[-1].split(".")[0] != KERNEL:
        top = missing[-1].split(".")[0]
        if KERNEL and _named_like_kernel(top):
            RUN.note_file(path, "needs", f"it imports '{top}', which the wheel does not provide "
                                         f"(its package is '{KERNEL}'): the kernel's tests name "
                                         "its package otherwise than the kernel ships it")
        else:
            RUN.note_file(path, "needs", f"the module '{missing[-1]}' is not installed")
    elif not HAS_GPU and _NO_GPU.search(text):
        RUN.note_file(path, "no-gpu", f"needs a GPU, and this machine has none "
                                      f"({_error_line(text)})")
    else:
        RUN.note_file(path, "error", _error_line(text))


def _named_like_kernel(module: str) -> bool:
    """Whether a missing module is the kernel's own package under another name (tests written
    for triton_kernels in a kernel shipped as gpt_oss_triton_kernels): a fault of the kernel,
    where any other missing module is a test dependency nobody installed."""
    words, own = set(module.split("_")), set(KERNEL.split("_"))
    return module in KERNEL or KERNEL in module or len(words & own) * 2 > len(words | own)


def _unfilled(item: pytest.Item) -> list[str]:
    """The parameters of a test that no fixture and no parametrization gives."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return []
    params = getattr(getattr(item, "callspec", None), "params", {})
    return sorted(set(info.names_closure) - set(info.name2fixturedefs) - set(params)
                  - {"request"})


def _path(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected theirs
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    runnable, left_out = [], []
    unfilled: dict[str, list[str]] = {}
    for item in items:
        missing = _unfilled(item)
        if missing:
            left_out.append(item)
            unfilled.setdefault(_path(item), []).append(f"{item.name} ({', '.join(missing)})")
        else:
            runnable.append(item)
    for path, tests in unfilled.items():
        more = " ..." if len(tests) > 3 else ""
        RUN.note_file(path, "unrunnable", f"{len(tests)} test(s) take arguments no fixture "
                                          f"gives: {', '.join(tests[:3])}{more}")
    if not (config.option.keyword or config.option.markexpr):
        runnable += _scripts(session, {_path(item) for item in runnable})
    RUN.collected = len(runnable)
    chosen = _choose(runnable) if CHOOSE else runnable
    left_out += [item for item in runnable if item not in chosen]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
    scripts = [item for item in chosen if isinstance(item, ScriptItem)]
    RUN.scripts = [{"path": _path(item), "file": str(item.path)} for item in scripts]
    if CHOOSE:  # a script is the first case of its file: it runs whatever the budget
        RUN.first -= len(scripts)
    items[:] = [item for item in chosen if not isinstance(item, ScriptItem)]
    RUN.chosen, RUN.in_pytest = len(chosen), len(items)
    RUN.tally()


def _scripts(session: pytest.Session, with_tests: set[str]) -> list[pytest.Item]:
    """A script item for each chosen file that has no runnable test and a __main__ block; the
    files with neither are noted."""
    found: list[pytest.Item] = []
    root = Path(session.config.rootpath)
    chosen = {Path(arg).resolve() for arg in session.config.args if "::" not in arg}
    for path in sorted(chosen):
        files = [path] if path.is_file() else sorted(
            file for pattern in ("test_*.py", "*_test.py") for file in path.rglob(pattern))
        for file in files:
            name = file.relative_to(root).as_posix() if file.is_relative_to(root) else str(file)
            known = RUN.files.get(name, {})
            if name in with_tests or known.get("kind") in ("error", "needs", "no-gpu"):
                continue
            try:
                text = file.read_text(errors="replace")
            except OSError:
                text = ""
            script = bool(_MAIN_BLOCK.search(text)) and not _RUNNER.search(text)
            if script:
                before = f"{known['detail']}; " if known else ""
                RUN.files[name] = {"kind": "script", "detail": f"{before}run as python {file.name}"}
                found += ScriptFile.from_parent(session, path=file).collect()
            elif not known:
                RUN.note_file(name, "no-tests", "holds no test pytest can run")
    return found


def _choose(items: list[pytest.Item]) -> list[pytest.Item]:
    marked = [item for item in items if item.get_closest_marker(MARKER) is not None]
    if marked and CHOOSE == "default":
        RUN.how = f"the tests marked {MARKER}"
        RUN.first = len(marked)
        return marked
    first: list[pytest.Item] = []
    rest: list[pytest.Item] = []
    seen: set[tuple[str, str]] = set()
    for item in items:
        function = (_path(item), item.nodeid.split("[", 1)[0])
        (rest if function in seen else first).append(item)
        seen.add(function)
    random.Random(SEED).shuffle(rest)
    RUN.first = len(first)
    RUN.how = (f"each test function once, then more cases in a seeded order (seed {SEED}) "
               f"until the {_duration(BUDGET)} budget was spent") if rest else ""
    return first + rest


def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    RUN.running = nodeid
    RUN.tally()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    RUN.note(report)


def pytest_runtest_logfinish(nodeid: str, location: Any) -> None:
    """Past the budget, no further case starts (the first case of every function always
    does)."""
    if CHOOSE and RUN.session is not None and RUN.ended >= RUN.first and \
            time.monotonic() - RUN.started >= BUDGET and RUN.ended < RUN.in_pytest:
        RUN.stopped = f"the {_duration(BUDGET)} budget was spent"
        RUN.session.shouldstop = RUN.stopped


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    report = outcome.get_result()
    if HAS_GPU or not report.failed or call.excinfo is None:
        return
    message = str(call.excinfo.value)
    if _NO_GPU.search(message) or _NO_GPU.search(call.excinfo.typename):
        # the last line that says so: a traceback ends with the error it raised
        first = next((line.strip()[:200] for line in reversed(message.splitlines())
                      if _NO_GPU.search(line)), call.excinfo.typename)
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0,
                           f"Skipped: needs a GPU, and this machine has none ({first})")


def pytest_sessionfinish(session: pytest.Session) -> None:
    target = _ENV.get("KERNEL_WHEEL_FACTORY_TEST_REPORT")
    if target:
        _write(target, RUN.report())
