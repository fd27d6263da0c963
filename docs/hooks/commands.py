"""MkDocs hook: the command reference page gets every command and option from the parser."""

from __future__ import annotations

from typing import Any

from factory.cli import make_parser
from factory.cli.reference import command_reference

MARKER = "<!-- factory-commands -->"


def on_page_markdown(markdown: str, **_: Any) -> str:
    return markdown.replace(MARKER, command_reference(make_parser())) if MARKER in markdown \
        else markdown
