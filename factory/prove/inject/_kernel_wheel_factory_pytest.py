"""pytest plugin of `factory test` (loaded with -p): a test that fails only because this machine
has no GPU (CUDA cannot start) is reported as skipped, with the reason, instead of failed; the
GPU the tests ran on is written to the file $KERNEL_WHEEL_FACTORY_TEST_REPORT names; and a
running tally (tests chosen, outcomes so far, the test running now) is kept in the file
$KERNEL_WHEEL_FACTORY_TEST_PROGRESS names, so a suite stopped at its time limit still says how
far it got."""

from __future__ import annotations

import json
import os
import re
from typing import Any

import pytest
import torch

HAS_GPU = torch.cuda.is_available()
# What torch and the CUDA runtime say when there is no GPU or driver to run on.
_NO_GPU = re.compile(
    r"Found no NVIDIA driver|no CUDA GPUs are available|no CUDA-capable device|"
    r"CUDA driver initialization failed|cudaErrorNoDevice|cudaErrorInsufficientDriver|"
    r"Torch not compiled with CUDA enabled|libcuda\.so[^ ]* cannot open|"
    r"CUDA driver version is insufficient|cuInit", re.IGNORECASE)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    report = outcome.get_result()
    if HAS_GPU or not report.failed or call.excinfo is None:
        return
    message = str(call.excinfo.value)
    if _NO_GPU.search(message) or _NO_GPU.search(call.excinfo.typename):
        first = message.strip().splitlines()[0] if message.strip() else call.excinfo.typename
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0,
                           f"Skipped: needs a GPU, and this machine has none ({first[:200]})")


class _Tally:
    """Outcomes counted the way pytest's JUnit report counts them: a failing setup or teardown
    is an error, an expected failure a skip."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.counts = {"chosen": 0, "ended": 0, "passed": 0, "failed": 0, "errors": 0,
                       "skipped": 0}
        self.running = ""

    def note(self, report: pytest.TestReport) -> None:
        if report.when == "call":
            self.counts[report.outcome] += 1
        elif report.failed:
            self.counts["errors"] += 1
        elif report.skipped:  # skipped in setup: the test never ran
            self.counts["skipped"] += 1
        if report.when == "teardown":  # written once a test has ended, not at every phase
            self.counts["ended"] += 1
            self.running = ""
            self.write()

    def write(self) -> None:
        # a fresh file renamed over the old one: the factory never reads half a tally
        partial = f"{self.target}.part"
        with open(partial, "w", encoding="utf-8") as handle:
            json.dump({**self.counts, "running": self.running}, handle)
        os.replace(partial, self.target)


_TALLY = _Tally(os.environ["KERNEL_WHEEL_FACTORY_TEST_PROGRESS"]) \
    if os.environ.get("KERNEL_WHEEL_FACTORY_TEST_PROGRESS") else None


def pytest_collection_finish(session: pytest.Session) -> None:
    if _TALLY is not None:
        _TALLY.counts["chosen"] = len(session.items)
        _TALLY.write()


def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    if _TALLY is not None:
        _TALLY.running = nodeid
        _TALLY.write()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if _TALLY is not None:
        _TALLY.note(report)


def pytest_sessionfinish(session: pytest.Session) -> None:
    target = os.environ.get("KERNEL_WHEEL_FACTORY_TEST_REPORT")
    if not target:
        return
    gpus = [torch.cuda.get_device_name(n) for n in range(torch.cuda.device_count())] \
        if HAS_GPU else []
    with open(target, "w", encoding="utf-8") as handle:
        json.dump({"gpus": gpus, "torch": torch.__version__, "cuda": torch.version.cuda},
                  handle)
