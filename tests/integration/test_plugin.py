"""The factory's pytest plugin and its stand-in `kernels` module, in real pytest runs of small
kernels' tests: what can run runs (collection errors named per file, scripts run as scripts,
functions no fixture can call left out), get_kernel of any repo id gets the kernel under test,
the tests marked kernels_ci are chosen, and a suite of thousands of cases runs each function
once, then more cases in a reproducible order, until its budget is spent. A stand-in torch
(the plugin asks it only whether a GPU is there) keeps these runs to a second or two."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from factory.prove.tests import (
    INJECT,
    PLUGIN,
    FileNote,
    TestReport,
    _report,
    run_scripts,
    script_tests,
)
from factory.system.process import Log

from ..support.factory import write

KERNEL = {"kwf_probe/__init__.py": "def double(x):\n    return 2 * x\n"}


def run_plugin(root: Path, tests: dict[str, str], *args: str,
               env: dict[str, str] | None = None) -> tuple[dict[str, Any], str]:
    """pytest over root/tests with the plugin, then the script tests it names, as the factory
    runs them; the plugin's report with the scripts counted in, and the output of both."""
    write(root / "stand-in" / "torch" / "__init__.py", """
        __version__ = "0.0"
        class version:
            cuda = None
        class cuda:
            @staticmethod
            def is_available():
                return False
            @staticmethod
            def device_count():
                return 0
    """)
    for name, text in KERNEL.items():
        write(root / "site" / name, text)
    for name, text in tests.items():
        write(root / "tests" / name, text)
    report = root / "report.json"
    environment = {**os.environ, "KERNEL_WHEEL_FACTORY_KERNEL": "kwf_probe",
                   "KERNEL_WHEEL_FACTORY_TEST_REPORT": str(report),
                   "KERNEL_WHEEL_FACTORY_TEST_PROGRESS": str(root / "progress.json"),
                   "KERNEL_WHEEL_FACTORY_STAND_IN": str(root / "asked"),
                   "PYTHONPATH": os.pathsep.join(str(path) for path in (
                       root / "stand-in", root / "site", INJECT)),
                   **(env or {})}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", PLUGIN, "-p", "no:cacheprovider",
                           "-rfEs", "--tb=short", "--rootdir", ".",
                           "--continue-on-collection-errors", *(args or ("tests/",))],
                          cwd=root, env=environment, capture_output=True, text=True,
                          timeout=300, check=False)
    with open(root / "scripts.log", "w") as handle:
        proven = run_scripts(_report(report, root / "progress.json", 0.0, done.returncode),
                             script_tests(report, root / "tests"), sys.executable, environment,
                             Log(handle), time.monotonic() + 300)
    data = json.loads(report.read_text())
    data |= {"passed": proven.passed, "failed": proven.failed, "skipped": proven.skipped,
             "ended": proven.cases[0] if proven.cases else data["ended"],
             "files": [note.to_json() for note in proven.files]}
    return data, done.stdout + done.stderr + (root / "scripts.log").read_text()


def notes(report: dict[str, Any]) -> dict[str, tuple[str, str]]:
    found: dict[str, tuple[str, str]] = {}
    for data in report["files"]:
        note = FileNote.from_json(data)
        assert note is not None, data
        found[note.path] = (note.kind, note.detail)
    return found


def test_what_can_run_runs_and_every_file_that_did_not_is_named(tmp_path: Path) -> None:
    report, output = run_plugin(tmp_path, {
        "test_ok.py": """
            from kernels import get_kernel

            probe = get_kernel("someone/scratch-kernel-123")


            def test_double():
                assert probe.double(2) == 4
        """,
        "test_needs.py": "import a_module_nobody_installed\n\ndef test_x():\n    pass\n",
        "test_renamed.py": "import probe.ops\n\ndef test_z():\n    pass\n",
        "test_broken.py": "from kwf_probe import gone\n\ndef test_y():\n    pass\n",
        "test_helpers.py": "def helper():\n    return 1\n",
        "test_script.py": """
            from kwf_probe import double


            def test_case(p):
                assert double(p) == 2 * p


            if __name__ == "__main__":
                for p in range(3):
                    test_case(p)
                print("all 3 cases passed")
        """,
        "test_failing_script.py": """
            def test_case(p):
                assert p == 0, f"case {p} is wrong"


            if __name__ == "__main__":
                test_case(1)
        """,
        "test_unittest_entry.py": "import unittest\n\nif __name__ == '__main__':\n"
                                  "    unittest.main()\n",
    })
    # test_double and test_script.py pass; the failing script and test_broken.py's error fail
    assert (report["passed"], report["failed"], report["errors"]) == (2, 1, 1), output
    found = notes(report)
    assert found["tests/test_needs.py"] == (
        "needs", "the module 'a_module_nobody_installed' is not installed")
    assert found["tests/test_renamed.py"] == (
        "needs", "it imports 'probe', which the wheel does not provide (its package is "
                 "'kwf_probe'): the kernel's tests name its package otherwise than the kernel "
                 "ships it")
    assert found["tests/test_broken.py"][0] == "error"
    assert "cannot import name 'gone' from 'kwf_probe'" in found["tests/test_broken.py"][1]
    assert found["tests/test_helpers.py"] == ("no-tests", "holds no test pytest can run")
    assert found["tests/test_unittest_entry.py"] == ("no-tests", "holds no test pytest can run")
    kind, detail = found["tests/test_script.py"]
    assert kind == "script" and detail.startswith(
        "1 test(s) take arguments no fixture gives: test_case (p); run as python "
        "test_script.py; it ended with exit 0 after ")
    assert detail.endswith(", its last line: all 3 cases passed")
    assert "python test_failing_script.py ended with exit 1; its last lines:" in output
    assert "AssertionError: case 1 is wrong" in output
    assert (tmp_path / "asked").read_text() == "someone/scratch-kernel-123\n"


def test_a_file_that_needs_a_gpu_is_named_not_failed_where_there_is_none(tmp_path: Path) -> None:
    report, output = run_plugin(tmp_path, {
        "test_gpu_only.py": "raise RuntimeError('Found no NVIDIA driver on your system')\n",
        "test_cpu.py": "def test_cpu():\n    pass\n",
        "test_gpu_script.py": "if __name__ == '__main__':\n"
                              "    raise RuntimeError('no CUDA GPUs are available')\n",
    })
    assert (report["passed"], report["failed"], report["errors"], report["skipped"]) == \
        (1, 0, 0, 1), output
    assert notes(report)["tests/test_gpu_only.py"] == (
        "no-gpu", "needs a GPU, and this machine has none (RuntimeError: Found no NVIDIA "
                  "driver on your system)")
    assert "needs a GPU, and this machine has none (RuntimeError: no CUDA GPUs are available)" \
        in output


def test_the_tests_marked_kernels_ci_are_the_default_choice(tmp_path: Path) -> None:
    tests = {"test_ci.py": """
        import pytest


        @pytest.mark.kernels_ci
        def test_marked():
            pass


        class TestGroup:
            pytestmark = pytest.mark.kernels_ci

            def test_in_class(self):
                pass


        @pytest.mark.parametrize("n", range(40))
        def test_long_sweep(n):
            pass
    """}
    report, output = run_plugin(tmp_path, tests, "-W", "error::pytest.PytestUnknownMarkWarning",
                                "tests/", env={"KERNEL_WHEEL_FACTORY_CHOOSE": "default",
                                               "KERNEL_WHEEL_FACTORY_BUDGET": "600"})
    assert (report["passed"], report["ended"], report["collected"]) == (2, 2, 42), output
    assert report["how"] == "the tests marked kernels_ci"
    # the matrix's own choice within a budget leaves the marker alone
    report, _ = run_plugin(tmp_path, tests, env={"KERNEL_WHEEL_FACTORY_CHOOSE": "budget",
                                                 "KERNEL_WHEEL_FACTORY_BUDGET": "600"})
    assert report["passed"] == 42


SWEEP = """
    import time
    from pathlib import Path

    import pytest


    def ran(name):
        with open(Path(__file__).with_name("ran.txt"), "a") as handle:
            handle.write(name + "\\n")


    @pytest.mark.parametrize("i", range({cases}))
    def test_sweep(i):
        ran(f"sweep-{{i}}")
        time.sleep({pause})


    @pytest.mark.parametrize("j", ["a", "b"])
    def test_last_function(j):
        ran(f"last-{{j}}")
"""


def swept(root: Path, cases: int, pause: float, budget: str) -> tuple[dict[str, Any], list[str]]:
    """The plugin's default choice over SWEEP within `budget` seconds: its report and the
    cases in the order they ran."""
    (root / "tests" / "ran.txt").unlink(missing_ok=True)
    report, output = run_plugin(root, {"test_sweep.py": SWEEP.format(cases=cases, pause=pause)},
                                env={"KERNEL_WHEEL_FACTORY_CHOOSE": "default",
                                     "KERNEL_WHEEL_FACTORY_BUDGET": budget})
    ran = (root / "tests" / "ran.txt").read_text().split()
    assert report["collected"] == cases + 2 and report["failed"] == 0, output
    assert report["ended"] == len(ran) == report["passed"]
    assert ran[:2] == ["sweep-0", "last-a"]  # every function once first, whatever the budget
    return report, ran


def test_thousands_of_cases_run_each_function_once_then_stop_at_the_budget(
        tmp_path: Path) -> None:
    # 3,002 cases of at least 2 ms each cannot all end in 1.5 s, however fast the machine; how
    # many start before the budget is spent depends on its load, and is not asserted
    report, _ = swept(tmp_path, 3000, 0.002, "1.5")
    assert 2 <= report["ended"] < 3002
    assert report["stopped"] == "the 1.5 s budget was spent"
    assert report["how"] == ("each test function once, then more cases in a seeded order "
                             "(seed 0) until the 1.5 s budget was spent")


def test_the_cases_after_each_functions_first_run_in_a_seeded_order(tmp_path: Path) -> None:
    # a budget nothing reaches: every case runs, in the same order both times, not the file's
    orders = [swept(tmp_path, 40, 0, "600")[1] for _ in range(2)]
    assert orders[0] == orders[1] and len(orders[0]) == 42
    in_file_order = [f"sweep-{i}" for i in range(1, 40)] + ["last-b"]
    assert orders[0][2:] != in_file_order and sorted(orders[0][2:]) == sorted(in_file_order)


def test_a_report_never_quotes_control_characters_from_the_tests(tmp_path: Path) -> None:
    report, _ = run_plugin(tmp_path, {
        "test_odd.py": "raise RuntimeError('bad \\x1b[2J\\x07 thing')\n",
    })
    note = FileNote.from_json(report["files"][0])
    assert note is not None and note.kind == "error"
    assert "\x1b" not in note.detail and "\x07" not in note.detail


def test_a_cutile_wheels_launches_are_counted_as_its_loader_served_them(tmp_path: Path) -> None:
    """The loader a cuTile wheel carries counts how each launch was served; the plugin reports
    those counts (a stand-in loader here: its counts as the real one keeps them), and the
    factory's report of the run says them."""
    write(tmp_path / "site" / "kwf_probe" / "_kernel_wheel_factory_cutile.py",
          'counts = {"served": 0, "assembled": 0, "compiled": 0}\n')
    report, output = run_plugin(tmp_path, {"test_launch.py": """
        from kwf_probe import _kernel_wheel_factory_cutile as loader


        def test_two_launches_served_one_compiled():
            loader.counts["served"] += 2
            loader.counts["compiled"] += 1
    """})
    assert report["passed"] == 1 and report["cutile"] == \
        {"served": 2, "assembled": 0, "compiled": 1}, output
    read = _report(tmp_path / "report.json", tmp_path / "progress.json", 1.0, 0)
    assert read.launches == (2, 0, 1)
    assert read.describe().endswith("; cuTile launches: 2 served by the wheel's cubins, 0 "
                                    "assembled from its Tile IR, 1 compiled by cuTile")
    assert TestReport.from_json(read.to_json()) == read
