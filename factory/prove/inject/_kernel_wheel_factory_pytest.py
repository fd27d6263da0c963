"""pytest plugin of `factory test` (loaded with -p): a test that fails only because this machine
has no GPU (CUDA cannot start) is reported as skipped, with the reason, instead of failed; and
the GPU the tests ran on is written to the file $KERNEL_WHEEL_FACTORY_TEST_REPORT names."""

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


def pytest_sessionfinish(session: pytest.Session) -> None:
    target = os.environ.get("KERNEL_WHEEL_FACTORY_TEST_REPORT")
    if not target:
        return
    gpus = [torch.cuda.get_device_name(n) for n in range(torch.cuda.device_count())] \
        if HAS_GPU else []
    with open(target, "w", encoding="utf-8") as handle:
        json.dump({"gpus": gpus, "torch": torch.__version__, "cuda": torch.version.cuda},
                  handle)
