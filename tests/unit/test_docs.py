"""The command reference is written from the parser: every command and option is in it, and the
documentation's source is where the site's configuration says."""

from __future__ import annotations

import re

import yaml

from factory.cli import make_parser
from factory.cli.reference import command_reference

from ..support.cli import option_strings
from ..support.factory import REPO


def test_the_reference_names_every_command_and_option_with_its_help() -> None:
    parser = make_parser()
    text = command_reference(parser)
    headings = re.findall(r"^## factory (\w+)$", text, re.MULTILINE)
    assert headings == list(option_strings(parser))
    for command, options in option_strings(parser).items():
        section = text.split(f"## factory {command}\n", 1)[1].split("\n## ", 1)[0]
        for option in options:
            assert re.search(rf"^- (`[^`]+`, )*`{re.escape(option)}[ `]", section, re.MULTILINE), \
                (command, option)
    assert "`--time-limit DURATION`: stop compiling after this long" in text
    assert "`--runner {local,docker,auto}`" in text
    assert "%(" not in text


def test_every_page_is_in_the_navigation() -> None:
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())

    def pages(entries: list[object]) -> list[str]:
        found: list[str] = []
        for entry in entries:
            value = next(iter(entry.values())) if isinstance(entry, dict) else entry
            found += pages(value) if isinstance(value, list) else [str(value)]
        return found

    on_disk = sorted(str(path.relative_to(REPO / "docs"))
                     for path in (REPO / "docs").rglob("*.md"))
    assert sorted(pages(config["nav"])) == on_disk
