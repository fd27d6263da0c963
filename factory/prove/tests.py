"""`factory test`: a kernel's own tests (its tests/ folder) run against the wheel built for a
cell, in a fresh environment beside the cell's torch that holds the wheel, its other
requirements and pytest.

The tests run from a copy of tests/ alone, so the kernel's source tree cannot shadow the
installed wheel. Tests that load the kernel through the `kernels` package (`get_kernel(
"org/name")`) get the installed wheel from a stand-in module (inject/kernels.py). Where the
machine has no GPU, a test that fails only because CUDA cannot start is counted as skipped,
with that reason (inject/_kernel_wheel_factory_pytest.py); the counts come from pytest's JUnit
XML report.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from ..config.model import ALL_TESTS, TestSelection
from ..errors import BuildError
from ..outputs.files import read_small_json
from ..system.process import Log, foreign_environment, run, streamed_run
from ..system.uv import uv_bin, uv_env
from ..toolchain.emulated import emulated_env_beside, install_emulated
from ..toolchain.torch import TorchEnv, env_beside_torch
from ..wheel.read import read_wheel

__all__ = ["TEST_TOOLS", "TestReport", "run_tests", "test_requirements"]

INJECT = Path(__file__).with_name("inject")
PLUGIN = "_kernel_wheel_factory_pytest"
TEST_TOOLS = ("pytest",)
# What the tests may see of the factory's environment besides the locale and search paths:
# which GPUs to use and how the GPU libraries behave (a name that says secret stays out).
GPU_VARIABLES = ("CUDA_", "NVIDIA_", "HIP_", "ROCR_", "TORCH_", "TRITON_", "NCCL_", "OMP_")
# Requirements the environment provides otherwise: the cell's torch, and the stand-in for
# `kernels` (which would download the kernel from the Hub).
_PROVIDED = {"torch", "kernels"}
_TALLY_LIMIT = 64 * 2**10  # bytes: the plugin's tally is a few numbers and one test's id


@dataclass(frozen=True)
class TestReport:
    """How a kernel's tests went against one cell's wheel."""

    __test__ = False  # not a test class, whatever pytest's collector thinks of the name

    passed: int
    failed: int
    errors: int
    skipped: int
    gpus: tuple[str, ...]  # the GPUs the tests could use (none: GPU tests skipped)
    seconds: float
    torch: str = ""
    selection: str = ""  # the tests chosen when not the whole suite ran (TestSelection)

    @property
    def ok(self) -> bool:
        return self.failed == 0 and self.errors == 0 and self.passed + self.skipped > 0

    def describe(self) -> str:
        where = f"on {', '.join(dict.fromkeys(self.gpus))}" if self.gpus else "with no GPU"
        errors = f", {self.errors} error(s)" if self.errors else ""
        chosen = f" (chosen: {self.selection})" if self.selection else ""
        return (f"{self.passed} passed, {self.failed} failed{errors}, {self.skipped} skipped "
                f"{where} in {self.seconds:.1f} s{chosen}")

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "failed": self.failed, "errors": self.errors,
                "skipped": self.skipped, "gpus": list(self.gpus), "seconds": self.seconds,
                "torch": self.torch, **({"selection": self.selection} if self.selection else {})}

    @classmethod
    def from_json(cls, data: Any) -> TestReport | None:
        try:
            return cls(int(data["passed"]), int(data["failed"]), int(data["errors"]),
                       int(data["skipped"]), tuple(map(str, data["gpus"])),
                       float(data["seconds"]), str(data.get("torch", "")),
                       str(data.get("selection", "")))
        except (TypeError, KeyError, ValueError):
            return None


def test_requirements(wheel: Path, extra: tuple[str, ...] = ()) -> list[str]:
    """What the test environment installs besides the wheel: pytest, what the kernel's tests
    need (`extra`) and the wheel's own Requires-Dist, but for torch (the cell's is there) and
    `kernels` (the stand-in is)."""
    requires = list(TEST_TOOLS)
    for text in (*extra, *read_wheel(wheel).requires):
        try:
            name = canonicalize_name(Requirement(text).name)
        except InvalidRequirement:
            continue
        if name not in _PROVIDED:
            requires.append(text)
    return requires


def run_tests(wheel: Path, tests: Path, module: str, torch: TorchEnv, folder: Path,
              cache: Path, log: Log, offline: bool = False,
              selection: TestSelection = ALL_TESTS, needs: tuple[str, ...] = ()) -> TestReport:
    """Make a fresh environment in `folder` beside `torch` with the wheel installed, and run
    the tests of the folder `tests` there with pytest (those `selection` chooses, within its
    time); `module` is the kernel's import name, `needs` what its repo says its tests need."""
    if not tests.is_dir():
        raise BuildError(f"the kernel has no tests/ folder ({tests}): nothing to run")
    _check_chosen(tests, selection)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    requires = test_requirements(wheel, (*needs, *selection.requires))
    log.step(f"making the test environment: torch {torch.torch_version}, {' '.join(requires)}")
    python = folder / "env" / "bin" / "python"
    if torch.platform is not None:  # an emulated torch: wheels for its platform
        site = emulated_env_beside(folder / "env", torch, requires, cache, log, offline,
                                   "installing the test requirements")
        install_emulated(wheel, site, torch, cache, log, offline)
    else:
        site = env_beside_torch(folder / "env", torch, requires, cache, log, offline,
                                "installing the test requirements",
                                "a requirement of the wheel installed a torch of its own; its "
                                "tests must use the cell's torch")
        run([uv_bin(), "pip", "install", "--quiet", "--no-deps", "--python", python, wheel],
            log, env=uv_env(cache, offline), what=f"installing {wheel.name}")
    for name in (f"{PLUGIN}.py", "kernels.py"):
        shutil.copyfile(INJECT / name, site / name)
    shutil.copytree(tests, folder / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    junit, facts = folder / "junit.xml", folder / "machine.json"
    progress = folder / "progress.json"
    # short tracebacks: a long one formats every frame's arguments, and formatting hundreds of
    # failures' GPU tensors can take longer than the tests did
    argv = [str(python), "-m", "pytest", "-p", PLUGIN, "-p", "no:cacheprovider", "-rfEs",
            "--tb=short", f"--junitxml={junit}", *selection.pytest_args()]
    # the tests are the kernel's own code: none of the factory's secrets reach them
    env = foreign_environment(folder, prefixes=GPU_VARIABLES)
    env |= {"PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1",
            "KERNEL_WHEEL_FACTORY_KERNEL": module,
            "KERNEL_WHEEL_FACTORY_TEST_REPORT": str(facts),
            "KERNEL_WHEEL_FACTORY_TEST_PROGRESS": str(progress)}
    log.step(f"running the kernel's tests: {' '.join(argv[1:])}")
    started = time.monotonic()
    try:
        status = streamed_run(argv, log, selection.timeout, env=env, cwd=folder)
    except subprocess.TimeoutExpired:
        raise BuildError(f"the tests did not finish in {selection.timeout:.0f} s"
                         f"{_how_far(progress)} (a kernel's tests: {{timeout: ...}} in "
                         f"matrix.yaml gives them longer)") from None
    seconds = time.monotonic() - started
    return replace(_report(junit, facts, seconds, status),
                   selection=selection.describe())


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
    root = tests.resolve()
    for path in selection.paths:
        where = tests / path.split("::", 1)[0]
        if not where.exists() or not where.resolve().is_relative_to(root):
            raise BuildError(f"the chosen tests '{path}' are not in the kernel's tests/ folder")


def _report(junit: Path, facts: Path, seconds: float, status: int) -> TestReport:
    try:
        root = ElementTree.parse(junit).getroot()
    except (OSError, ElementTree.ParseError):
        raise BuildError(f"pytest ran no tests (exit {status}): see the log") from None
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    count = {key: sum(int(suite.get(key, 0)) for suite in suites)
             for key in ("tests", "failures", "errors", "skipped")}
    machine: dict[str, Any] = {}
    try:
        machine = json.loads(facts.read_text())
    except (OSError, ValueError):
        pass
    return TestReport(
        passed=count["tests"] - count["failures"] - count["errors"] - count["skipped"],
        failed=count["failures"], errors=count["errors"], skipped=count["skipped"],
        gpus=tuple(machine.get("gpus") or ()), seconds=round(seconds, 1),
        torch=str(machine.get("torch", "")))
