"""The guard of tests/unit (conftest.py): starting a program here fails the test."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest


@pytest.mark.parametrize("start", [
    lambda: subprocess.run(["true"], check=False),
    lambda: subprocess.Popen([sys.executable, "-c", "pass"]),
    lambda: os.system("true"),
])
def test_a_unit_test_cannot_start_a_process(start: Any) -> None:
    with pytest.raises(RuntimeError, match="belong in tests/integration/"):
        start()
