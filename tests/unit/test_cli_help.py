"""Every command's --help works, and a mistyped option, command or value is answered with the
nearest right one."""

from __future__ import annotations

import pytest

from factory.cli import COMMANDS, main


@pytest.mark.parametrize("command", [[], *([name] for name in COMMANDS)])
def test_every_help_prints_its_usage_and_exits_0(command: list[str],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main([*command, "--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: factory {' '.join(command)}".rstrip())
    assert "options:" in out


@pytest.mark.parametrize(("argv", "expected"), [
    (["build", "matrix.yaml", "--runer", "local"],
     "unrecognized arguments: --runer local; did you mean --runner? (see 'factory build --help')"),
    (["plan", "matrix.yaml", "--formt=json"], "did you mean --format?"),
    (["build", "matrix.yaml", "--jbos", "3", "--tset"], "did you mean --jobs --test?"),
    (["bild", "matrix.yaml"], "did you mean build? (see 'factory --help')"),
    (["build", "matrix.yaml", "--runner", "dockr"], "did you mean docker?"),
])
def test_a_mistyped_word_gets_the_nearest_right_one(argv: list[str], expected: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert expected in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv", [
    ["build", "matrix.yaml", "--colour"],
    ["build", "matrix.yaml", "--runner", "podman"],
])
def test_nothing_is_suggested_when_nothing_is_near(argv: list[str],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert "did you mean" not in capsys.readouterr().err
