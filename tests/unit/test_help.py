"""Every subcommand's --help prints its usage and options and exits 0 (a help string is an
argparse format: a stray `%` in one breaks it)."""

from __future__ import annotations

from typing import Any

import pytest

from factory.cli import COMMANDS, main


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_every_help_works(command: Any, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--help"] if command is None else [command, "--help"]
    with pytest.raises(SystemExit) as exited:
        main(argv)
    out = capsys.readouterr().out
    assert exited.value.code == 0
    assert out.startswith("usage: factory") and "--help" in out
    if command is not None:
        assert f"factory {command}" in out
