"""The documentation site builds with MkDocs in strict mode (a broken link or anchor, or a page
left out of the navigation, fails), and its command reference holds every option."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from factory.cli import make_parser

from ..support.cli import option_strings
from ..support.factory import REPO


def test_the_site_builds_strictly_with_every_command_and_option(tmp_path: Path) -> None:
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "WARNING" not in done.stderr
    page = (site / "reference" / "commands" / "index.html").read_text()
    for command, options in option_strings(make_parser()).items():
        assert f"factory {command}" in page
        for option in options:
            assert option in page, (command, option)
    assert (site / "promises" / "index.html").is_file()
    assert (site / "getting-started" / "index.html").is_file()
