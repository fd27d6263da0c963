"""README.md tells a new user two command lines; CI must run the second one, as written."""

from __future__ import annotations

import re

from ..support.checks import present
from ..support.factory import REPO


def readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    setup = text.split("## Set up and try it", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.+?)\n```", setup)[:2]


def test_readme_gives_a_build_line_and_a_test_line() -> None:
    build, test = readme_commands()
    assert build.endswith("factory build matrix.yaml --locked")
    assert "pytest" in test


def test_ci_runs_the_readme_test_command() -> None:
    _, test = readme_commands()
    script = (REPO / ".ci" / "run").read_text().splitlines()
    assert test in script


def test_every_promise_names_tests_that_exist() -> None:
    """Each promise of docs/promises.md names the tests that hold it; each named test is there."""
    promises = (REPO / "docs" / "promises.md").read_text().split("\n\n", 1)[1]
    items = [item for item in promises.split("\n- ") if item.strip()]
    assert len(items) >= 6
    for item in items:
        named = re.findall(r"`(tests/[\w/]+\.py)(?:::(\w+))?`|`::(\w+)`", item)
        assert named, item[:60]
        current = None
        for path, test, bare in named:
            current = path or current
            source = (REPO / present(current)).read_text()
            for name in (test, bare):
                if name:
                    assert re.search(rf"^def {name}\(", source, re.MULTILINE), (current, name)


def test_every_link_of_the_readme_reaches_a_file_of_the_repo() -> None:
    """README.md links into docs/ (which MkDocs checks strictly); its own links are checked here."""
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", (REPO / "README.md").read_text())
    local = [link for link in links if "://" not in link]
    assert len(local) >= 10
    for link in local:
        assert (REPO / link).is_file(), link
